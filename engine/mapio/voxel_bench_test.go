package mapio

import (
	"fmt"
	"math"
	"testing"
)

// benchFrames are n frames of 518×378 points, as run unprojects them: a
// camera moving 2 cm a frame along x before a wall 2–6 m away, seen through
// 400-pixel focal lengths, with a few millimetres of depth noise.
func benchFrames(n int) [][]Point {
	const w, h, f = 518, 378, 400.0
	out := make([][]Point, n)
	seed := uint32(1)
	for i := range out {
		pts := make([]Point, 0, w*h)
		cx := 0.02 * float64(i)
		for v := 0; v < h; v++ {
			for u := 0; u < w; u++ {
				seed = seed*1664525 + 1013904223
				z := 2 + 4*float64(u)/w + 0.004*(float64(seed>>8)/(1<<24)-0.5)
				x := (float64(u)-w/2)/f*z + cx
				y := (float64(v) - h/2) / f * z
				pts = append(pts, Point{X: float32(x), Y: float32(y), Z: float32(z), R: uint8(u), G: uint8(v), B: 128})
			}
		}
		out[i] = pts
	}
	return out
}

// BenchmarkVoxelGridAdd is the map's serial step in run (Folder.Add): one
// frame's points into a grid of 2 cm voxels that already holds the frames
// before it (64 frames, then the grid starts again).
func BenchmarkVoxelGridAdd(b *testing.B) {
	frames := benchFrames(64)
	g := NewVoxelGrid(0.02)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%len(frames) == 0 {
			b.StopTimer()
			g.Reset()
			b.StartTimer()
		}
		g.Add(frames[i%len(frames)])
	}
	b.ReportMetric(float64(g.Len()), "voxels")
}

// TestVoxelGridMeans: every voxel's point is the mean of the points that fell
// into it, whatever voxels the points before and after them took.
func TestVoxelGridMeans(t *testing.T) {
	frames := benchFrames(3)
	g := NewVoxelGrid(0.02)
	type sum struct{ x, y, z, r, n float64 }
	want := map[[3]int32]*sum{}
	var order [][3]int32
	for _, f := range frames {
		g.Add(f)
		for _, p := range f {
			k := [3]int32{int32(math.Floor(float64(p.X) / 0.02)), int32(math.Floor(float64(p.Y) / 0.02)), int32(math.Floor(float64(p.Z) / 0.02))}
			s := want[k]
			if s == nil {
				s = &sum{}
				want[k] = s
				order = append(order, k)
			}
			s.x, s.y, s.z, s.r, s.n = s.x+float64(p.X), s.y+float64(p.Y), s.z+float64(p.Z), s.r+float64(p.R), s.n+1
		}
	}
	got := g.Points()
	if len(got) != len(order) {
		t.Fatalf("%d voxels, want %d", len(got), len(order))
	}
	for i, k := range order {
		s := want[k]
		w := Point{X: float32(s.x / s.n), Y: float32(s.y / s.n), Z: float32(s.z / s.n), R: uint8(math.Round(s.r / s.n))}
		if p := got[i]; p.X != w.X || p.Y != w.Y || p.Z != w.Z || p.R != w.R {
			t.Fatalf("voxel %d %v: %v, want %v", i, k, fmt.Sprint(p), fmt.Sprint(w))
		}
	}
}
