package mapio

import "math"

// MinVoxelSize is the smallest voxel edge a map takes. Voxel indices are
// 32-bit, so the edge bounds the extent of the map: at this edge a point up
// to 2 km from the origin still has a voxel, while an edge of 1e-12 would
// leave only a few millimetres around it and silently drop every other
// point. Points beyond the bound are counted (Stats.Outside).
const MinVoxelSize = 1e-6

// VoxelGrid accumulates points and keeps one averaged point per cubic voxel, so
// that a map's size grows with the explored volume, not with the frame count.
type VoxelGrid struct {
	size  float64
	cells map[[3]int32]int // voxel -> index into acc
	acc   []voxelAcc
	// outside counts the finite points whose voxel index is beyond 32 bits
	outside int64
}

type voxelAcc struct {
	x, y, z, r, g, b float64
	n                float64
}

// NewVoxelGrid makes a grid with the given edge length in metres (> 0).
func NewVoxelGrid(size float64) *VoxelGrid {
	return &VoxelGrid{size: size, cells: map[[3]int32]int{}}
}

// Add puts points into the grid; non-finite points are ignored.
func (g *VoxelGrid) Add(pts []Point) {
	for _, p := range pts {
		x, y, z := float64(p.X), float64(p.Y), float64(p.Z)
		if math.IsNaN(x+y+z) || math.IsInf(x+y+z, 0) {
			continue
		}
		fx, fy, fz := math.Floor(x/g.size), math.Floor(y/g.size), math.Floor(z/g.size)
		if math.Abs(fx) > math.MaxInt32 || math.Abs(fy) > math.MaxInt32 || math.Abs(fz) > math.MaxInt32 {
			g.outside++
			continue
		}
		k := [3]int32{int32(fx), int32(fy), int32(fz)}
		i, ok := g.cells[k]
		if !ok {
			i = len(g.acc)
			g.cells[k] = i
			g.acc = append(g.acc, voxelAcc{})
		}
		a := &g.acc[i]
		a.x += x
		a.y += y
		a.z += z
		a.r += float64(p.R)
		a.g += float64(p.G)
		a.b += float64(p.B)
		a.n++
	}
}

// Outside is the number of finite points left out because they lie too far
// from the origin for a voxel index at this edge.
func (g *VoxelGrid) Outside() int64 { return g.outside }

// Len is the number of occupied voxels.
func (g *VoxelGrid) Len() int { return len(g.acc) }

// Points returns one point per voxel (the mean of its points), in insertion order.
func (g *VoxelGrid) Points() []Point {
	out := make([]Point, len(g.acc))
	for i, a := range g.acc {
		out[i] = Point{
			X: float32(a.x / a.n), Y: float32(a.y / a.n), Z: float32(a.z / a.n),
			R: uint8(math.Round(a.r / a.n)), G: uint8(math.Round(a.g / a.n)), B: uint8(math.Round(a.b / a.n)),
		}
	}
	return out
}

// Reset empties the grid.
func (g *VoxelGrid) Reset() {
	g.cells = map[[3]int32]int{}
	g.acc = g.acc[:0]
	g.outside = 0
}
