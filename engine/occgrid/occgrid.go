// Package occgrid projects a 3D point map into a 2D occupancy grid, the map a
// planner such as nav2 reads (nav_msgs/OccupancyGrid): points within a height
// band are obstacles, points on the floor below the band are free space seen,
// and the cells between a camera and the obstacles it saw are free.
package occgrid

import (
	"errors"
	"fmt"
	"math"
)

// Cell values as nav_msgs/OccupancyGrid has them.
const (
	Unknown  int8 = -1
	Free     int8 = 0
	Occupied int8 = 100
)

// Config says how the grid is made. Lengths are in the map's units (metres
// once the scale is known); heights are along the map's z (up).
type Config struct {
	// Resolution is a cell's edge.
	Resolution float64
	// MinZ and MaxZ bound the obstacle band: a point with MinZ ≤ z ≤ MaxZ is
	// an obstacle (the robot's height above its floor, say 0.1 to 1.5 m).
	MinZ, MaxZ float64
	// FloorZ is the lowest height of floor points: a point with
	// FloorZ ≤ z < MinZ marks its cell as seen free.
	FloorZ float64
	// MinHits is the number of band points a cell needs to be occupied
	// (noise in a learned depth map leaves single stray points).
	MinHits int
	// RayRange is the farthest a camera's free-space ray is traced; 0 traces
	// none.
	RayRange float64
	// Origin fixes the grid's lower-left corner (x, y); when nil the grid
	// is fitted around the points with Margin cells to spare.
	Origin *[2]float64
	// Width and Height in cells when Origin is set.
	Width, Height int
	Margin        int
	// MaxCells bounds the grid's size; a map larger than it is refused
	// rather than filling memory.
	MaxCells int
}

// DefaultConfig suits an indoor ground robot in metres.
func DefaultConfig() Config {
	return Config{Resolution: 0.05, MinZ: 0.1, MaxZ: 1.5, FloorZ: -0.3, MinHits: 2,
		RayRange: 8, Margin: 10, MaxCells: 4000 * 4000}
}

// ErrConfig marks settings Check refuses.
var ErrConfig = errors.New("occgrid: bad configuration")

// Check names the setting that is wrong.
func (c Config) Check() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(f, a...)) }
	switch {
	case !(c.Resolution > 0) || math.IsInf(c.Resolution, 0):
		return bad("resolution %g, need a finite number > 0", c.Resolution)
	case !(c.MaxZ > c.MinZ) || math.IsInf(c.MaxZ-c.MinZ, 0):
		return bad("height band [%g, %g] is empty", c.MinZ, c.MaxZ)
	case !(c.FloorZ <= c.MinZ):
		return bad("floor height %g above the band's bottom %g", c.FloorZ, c.MinZ)
	case c.MinHits < 1:
		return bad("min hits %d, need ≥ 1", c.MinHits)
	case !(c.RayRange >= 0):
		return bad("ray range %g, need ≥ 0", c.RayRange)
	case c.MaxCells < 1:
		return bad("max cells %d, need ≥ 1", c.MaxCells)
	case c.Origin != nil && (c.Width < 1 || c.Height < 1):
		return bad("a fixed origin needs a width and height ≥ 1 cell (%d × %d)", c.Width, c.Height)
	case c.Origin == nil && c.Margin < 0:
		return bad("margin %d, need ≥ 0", c.Margin)
	}
	return nil
}

// Grid is an occupancy grid: row-major from its origin (the lower-left
// corner of cell (0, 0)), x along rows, as nav_msgs/OccupancyGrid.
type Grid struct {
	Width, Height    int
	Resolution       float64
	OriginX, OriginY float64
	Data             []int8
	// Occupied and Free count the cells of each kind.
	Occupied, Free int
}

// Cell returns the cell holding (x, y), or false outside the grid.
func (g *Grid) Cell(x, y float64) (cx, cy int, ok bool) {
	fx := math.Floor((x - g.OriginX) / g.Resolution)
	fy := math.Floor((y - g.OriginY) / g.Resolution)
	if !(fx >= 0 && fy >= 0 && fx < float64(g.Width) && fy < float64(g.Height)) {
		return 0, 0, false
	}
	return int(fx), int(fy), true
}

// At is the value of a cell.
func (g *Grid) At(cx, cy int) int8 { return g.Data[cy*g.Width+cx] }

// Project makes the grid from points (the map, z up) and the camera
// positions that saw them. Non-finite points are ignored.
func Project(points [][3]float64, cameras [][3]float64, cfg Config) (*Grid, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	g := &Grid{Resolution: cfg.Resolution}
	if cfg.Origin != nil {
		g.OriginX, g.OriginY, g.Width, g.Height = cfg.Origin[0], cfg.Origin[1], cfg.Width, cfg.Height
	} else {
		minX, minY, maxX, maxY := math.Inf(1), math.Inf(1), math.Inf(-1), math.Inf(-1)
		grow := func(p [3]float64) {
			minX, maxX = math.Min(minX, p[0]), math.Max(maxX, p[0])
			minY, maxY = math.Min(minY, p[1]), math.Max(maxY, p[1])
		}
		for _, p := range points {
			if finite(p) && p[2] >= cfg.FloorZ && p[2] <= cfg.MaxZ {
				grow(p)
			}
		}
		for _, c := range cameras {
			if finite(c) {
				grow(c)
			}
		}
		if math.IsInf(minX, 0) {
			minX, minY, maxX, maxY = 0, 0, 0, 0
		}
		m := float64(cfg.Margin) * cfg.Resolution
		g.OriginX = math.Floor((minX-m)/cfg.Resolution) * cfg.Resolution
		g.OriginY = math.Floor((minY-m)/cfg.Resolution) * cfg.Resolution
		w := math.Floor((maxX+m-g.OriginX)/cfg.Resolution) + 1
		h := math.Floor((maxY+m-g.OriginY)/cfg.Resolution) + 1
		if w*h > float64(cfg.MaxCells) {
			return nil, fmt.Errorf("occgrid: the map spans %.0f × %.0f cells of %g, more than %d: raise the resolution or max cells",
				w, h, cfg.Resolution, cfg.MaxCells)
		}
		g.Width, g.Height = int(w), int(h)
	}
	if g.Width*g.Height > cfg.MaxCells {
		return nil, fmt.Errorf("occgrid: %d × %d cells, more than %d", g.Width, g.Height, cfg.MaxCells)
	}
	n := g.Width * g.Height
	hits := make([]int32, n)
	floor := make([]bool, n)
	for _, p := range points {
		if !finite(p) || p[2] < cfg.FloorZ || p[2] > cfg.MaxZ {
			continue
		}
		cx, cy, ok := g.Cell(p[0], p[1])
		if !ok {
			continue
		}
		if p[2] >= cfg.MinZ {
			hits[cy*g.Width+cx]++
		} else {
			floor[cy*g.Width+cx] = true
		}
	}
	g.Data = make([]int8, n)
	for i := range g.Data {
		switch {
		case hits[i] >= int32(cfg.MinHits):
			g.Data[i] = Occupied
		case floor[i]:
			g.Data[i] = Free
		default:
			g.Data[i] = Unknown
		}
	}
	if cfg.RayRange > 0 {
		g.traceFree(cameras, cfg.RayRange)
	}
	for _, v := range g.Data {
		switch v {
		case Occupied:
			g.Occupied++
		case Free:
			g.Free++
		}
	}
	return g, nil
}

// traceFree marks free the unknown cells on the line from each camera to each
// occupied cell within rng, up to the first occupied cell.
func (g *Grid) traceFree(cameras [][3]float64, rng float64) {
	r := int(math.Ceil(rng / g.Resolution))
	var occ [][2]int
	for cy := 0; cy < g.Height; cy++ {
		for cx := 0; cx < g.Width; cx++ {
			if g.Data[cy*g.Width+cx] == Occupied {
				occ = append(occ, [2]int{cx, cy})
			}
		}
	}
	for _, c := range cameras {
		if !finite(c) {
			continue
		}
		x0, y0, ok := g.Cell(c[0], c[1])
		if !ok {
			continue
		}
		for _, o := range occ {
			dx, dy := o[0]-x0, o[1]-y0
			if dx*dx+dy*dy > r*r {
				continue
			}
			g.line(x0, y0, o[0], o[1])
		}
	}
}

// line walks from (x0, y0) towards (x1, y1) (Bresenham), marking unknown
// cells free and stopping at the first occupied one.
func (g *Grid) line(x0, y0, x1, y1 int) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		i := y0*g.Width + x0
		if g.Data[i] == Occupied {
			return
		}
		g.Data[i] = Free
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func finite(p [3]float64) bool {
	return !math.IsNaN(p[0]+p[1]+p[2]) && !math.IsInf(p[0]+p[1]+p[2], 0)
}

func abs(a int) int {
	if a < 0 {
		return -a
	}
	return a
}

func sign(a int) int {
	switch {
	case a > 0:
		return 1
	case a < 0:
		return -1
	}
	return 0
}
