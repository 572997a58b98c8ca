package mapframe

import (
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/geom"
)

// BenchmarkPoints converts a 518×378 keyframe's points into the map frame,
// as the node does for each cloud it publishes.
func BenchmarkPoints(b *testing.B) {
	pts := make([]geom.Point, 518*378)
	for i := range pts {
		pts[i] = geom.Point{X: float32(i%518) * 0.01, Y: float32(i/518) * 0.01, Z: 2, R: 3, G: 4, B: 5}
	}
	f := New()
	if err := f.SetScale(0.5); err != nil {
		b.Fatal(err)
	}
	dst := make([]geom.Point, len(pts))
	b.Run("fresh", func(b *testing.B) {
		for b.Loop() {
			_ = f.Points(nil, pts)
		}
	})
	b.Run("reused", func(b *testing.B) {
		for b.Loop() {
			_ = f.Points(dst, pts)
		}
	})
}
