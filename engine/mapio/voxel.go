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
// Voxels are found through bricks of 8×8×8 voxels (a Go map of bricks,
// each an array of its voxels' indices), not a map of voxels: neighbouring
// pixels fall into one brick, so most points touch only memory the points
// before them did. run and the node add every frame's points on one
// goroutine, in frame order (BenchmarkVoxelGridAdd times it).
type VoxelGrid struct {
	size   float64
	bricks map[[3]int32]*voxelBrick
	// voxels in the order they were first filled, in chunks of voxelChunk
	// (growing copies nothing); n of them are in use
	voxels [][]voxel
	n      int
	// lastKey, last: the brick the previous point went to
	lastKey [3]int32
	last    *voxelBrick
	// outside counts the finite points whose voxel index is beyond 32 bits
	outside int64
}

type voxelAcc struct {
	x, y, z, r, g, b float64
	n                float64
}

// voxel is a voxel's index and the sums of its points.
type voxel struct {
	key [3]int32
	voxelAcc
}

// voxelChunk is log2 of the voxels a chunk holds.
const voxelChunk = 15

// brickBits is log2 of a brick's edge in voxels.
const brickBits = 3

// voxelBrick holds, for each voxel of a brick, its place in the voxels
// plus one (0: no point yet).
type voxelBrick [1 << (3 * brickBits)]int32

// NewVoxelGrid makes a grid with the given edge length in metres (> 0).
func NewVoxelGrid(size float64) *VoxelGrid {
	g := &VoxelGrid{size: size}
	g.Reset()
	return g
}

// entry is voxel k's place in its brick, which is made if create is set
// (else nil when the brick is empty).
func (g *VoxelGrid) entry(k [3]int32, create bool) *int32 {
	bk := [3]int32{k[0] >> brickBits, k[1] >> brickBits, k[2] >> brickBits}
	if g.last == nil || bk != g.lastKey {
		b := g.bricks[bk]
		if b == nil {
			if !create {
				return nil
			}
			b = new(voxelBrick)
			g.bricks[bk] = b
		}
		g.lastKey, g.last = bk, b
	}
	const m = 1<<brickBits - 1
	return &g.last[k[0]&m|(k[1]&m)<<brickBits|(k[2]&m)<<(2*brickBits)]
}

// at is the i-th voxel.
func (g *VoxelGrid) at(i int) *voxel {
	return &g.voxels[i>>voxelChunk][i&(1<<voxelChunk-1)]
}

// find is k's voxel, made (empty) if it is new.
func (g *VoxelGrid) find(k [3]int32) *voxel {
	e := g.entry(k, true)
	if *e == 0 {
		if g.n>>voxelChunk == len(g.voxels) {
			g.voxels = append(g.voxels, make([]voxel, 1<<voxelChunk))
		}
		*g.at(g.n) = voxel{key: k}
		g.n++
		*e = int32(g.n)
	}
	return g.at(int(*e - 1))
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
		a := &g.find([3]int32{int32(fx), int32(fy), int32(fz)}).voxelAcc
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
func (g *VoxelGrid) Len() int { return g.n }

// Points returns one point per voxel (the mean of its points), in insertion order.
func (g *VoxelGrid) Points() []Point {
	out := make([]Point, g.n)
	for i := range out {
		a := g.at(i)
		out[i] = Point{
			X: float32(a.x / a.n), Y: float32(a.y / a.n), Z: float32(a.z / a.n),
			R: uint8(math.Round(a.r / a.n)), G: uint8(math.Round(a.g / a.n)), B: uint8(math.Round(a.b / a.n)),
		}
	}
	return out
}

// Reset empties the grid.
func (g *VoxelGrid) Reset() {
	g.bricks = map[[3]int32]*voxelBrick{}
	g.n = 0
	g.last = nil
	g.outside = 0
}

// has reports whether voxel k holds points.
func (g *VoxelGrid) has(k [3]int32) bool {
	e := g.entry(k, false)
	return e != nil && *e != 0
}

// restore appends voxel k with the sums a (a saved map's; k is new).
func (g *VoxelGrid) restore(k [3]int32, a voxelAcc) {
	g.find(k).voxelAcc = a
}

// each calls fn with every voxel's index and sums, in insertion order.
func (g *VoxelGrid) each(fn func(k [3]int32, a voxelAcc)) {
	for i := 0; i < g.n; i++ {
		v := g.at(i)
		fn(v.key, v.voxelAcc)
	}
}
