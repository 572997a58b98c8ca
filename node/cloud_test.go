package node_test

import (
	"math"
	"testing"

	"github.com/lingbotmap/lingbotmap/internal/golden/goldentest"
	"github.com/lingbotmap/lingbotmap/node"
)

// Every cloud point must be the reference's unprojection of its pixel
// (world_points_from_depth), and exactly the pixels with conf > 1.5 are kept.
func TestCloudPointsMatchReferenceUnprojection(t *testing.T) {
	s := goldenReplay(t)
	wp, err := goldentest.Open(t, "images_kf1", "outputs.safetensors").Float32("world_points_from_depth")
	if err != nil {
		t.Fatal(err)
	}
	w, h := s.Size()
	for i := range s.Len() {
		r := s.Reference(i)
		pts := node.CloudPoints(r, 1.5, 1)
		k := 0
		for p := range w * h {
			if !(r.Conf[p] > 1.5) {
				continue
			}
			if k >= len(pts) {
				t.Fatalf("frame %d: only %d points, more confident pixels remain", i, len(pts))
			}
			ref := wp[3*(i*w*h+p):]
			got := pts[k]
			for c, v := range []float32{got.X, got.Y, got.Z} {
				if d := math.Abs(float64(v - ref[c])); d > 1e-4*(1+math.Abs(float64(ref[c]))) {
					t.Fatalf("frame %d pixel %d: point %v, reference %v", i, p, got, ref[:3])
				}
			}
			if got.R != r.RGB[3*p] || got.G != r.RGB[3*p+1] || got.B != r.RGB[3*p+2] {
				t.Fatalf("frame %d pixel %d: colour %d,%d,%d, image %v", i, p, got.R, got.G, got.B, r.RGB[3*p:3*p+3])
			}
			k++
		}
		if k != len(pts) || k == 0 {
			t.Fatalf("frame %d: %d points for %d confident pixels", i, len(pts), k)
		}
	}
	if n1, n2 := len(node.CloudPoints(s.Reference(0), 1.5, 1)), len(node.CloudPoints(s.Reference(0), 1.5, 2)); n2 >= n1 || n2 == 0 {
		t.Errorf("stride 2 kept %d of %d points", n2, n1)
	}
}
