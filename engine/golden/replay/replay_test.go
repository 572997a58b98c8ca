package replay

import (
	"context"
	"image"
	"math"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/golden/goldentest"
	"github.com/lingbotmap/lingbotmap/internal/shared/sharedtest"
)

func goldenDir(t *testing.T) string {
	t.Helper()
	return sharedtest.Path(t, "golden", "images_kf1")
}

func loadGolden(t *testing.T, key string) []float32 {
	t.Helper()
	return goldentest.Output(t, "images_kf1", key)
}

// The replay's pose and intrinsics come from pose_enc; the reference's own
// conversion (extrinsic = world→camera, intrinsic K) must agree with them.
func TestReplayMatchesReferenceConversions(t *testing.T) {
	s, err := New(goldenDir(t))
	if err != nil {
		t.Fatal(err)
	}
	ext, intr := loadGolden(t, "extrinsic"), loadGolden(t, "intrinsic")
	for i := range s.Len() {
		r := s.Reference(i)
		w2c := geom.InvertRigid(r.CamToWorld)
		for a := range 3 {
			for b := range 4 {
				if d := math.Abs(w2c[a][b] - float64(ext[12*i+4*a+b])); d > 2e-5 {
					t.Fatalf("frame %d: world→camera[%d][%d] = %g, reference %g", i, a, b, w2c[a][b], ext[12*i+4*a+b])
				}
			}
		}
		k := intr[9*i:]
		want := [4]float64{float64(k[0]), float64(k[4]), float64(k[2]), float64(k[5])}
		for j := range 4 {
			if d := math.Abs(r.Intrinsics[j]-want[j]) / want[j]; d > 1e-5 {
				t.Fatalf("frame %d: intrinsics %v, reference %v", i, r.Intrinsics, want)
			}
		}
	}
}

// Every confident point of a replayed result must be the reference's
// unprojection of its pixel (world_points_from_depth), and exactly the pixels
// with conf > 1.5 are kept.
func TestConfidentPointsMatchReferenceUnprojection(t *testing.T) {
	s, err := New(goldenDir(t))
	if err != nil {
		t.Fatal(err)
	}
	wp := loadGolden(t, "world_points_from_depth")
	w, h := s.Size()
	for i := range s.Len() {
		r := s.Reference(i)
		pts, err := geom.ConfidentPoints(nil, r.DepthFrame(), geom.PointFilter{ConfThreshold: 1.5, Stride: 1})
		if err != nil {
			t.Fatal(err)
		}
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
	r0 := s.Reference(0)
	p1, _ := geom.ConfidentPoints(nil, r0.DepthFrame(), geom.PointFilter{ConfThreshold: 1.5, Stride: 1})
	p2, _ := geom.ConfidentPoints(nil, r0.DepthFrame(), geom.PointFilter{ConfThreshold: 1.5, Stride: 2})
	if n1, n2 := len(p1), len(p2); n2 >= n1 || n2 == 0 {
		t.Errorf("stride 2 kept %d of %d points", n2, n1)
	}
}

// Phase 1 buffers the scale frames; afterwards one frame in, one out.
func TestReplayPhaseOneBuffering(t *testing.T) {
	s, err := New(goldenDir(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	img := image.NewRGBA(image.Rect(0, 0, 4, 4))
	var got []engine.Result
	for i := range 5 {
		res, err := s.Push(ctx, engine.Frame{Seq: uint64(i), Stamp: time.Unix(int64(100+i), 0), Image: img})
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		switch {
		case i == s.ScaleFrames()-1:
			want = s.ScaleFrames()
		case i >= s.ScaleFrames():
			want = 1
		}
		if len(res) != want {
			t.Fatalf("push %d gave %d results, want %d", i, len(res), want)
		}
		got = append(got, res...)
	}
	for i, r := range got {
		if r.Seq != uint64(i) || !r.Stamp.Equal(time.Unix(int64(100+i), 0)) {
			t.Fatalf("result %d has seq %d stamp %v", i, r.Seq, r.Stamp)
		}
	}
	if st := s.Stats(); st.FrameCount != 5 || st.FramesIn != 5 {
		t.Errorf("stats %+v", st)
	}
	if _, err := s.Push(ctx, engine.Frame{}); err == nil {
		t.Error("a frame without pixels was accepted")
	}
	if err := s.Reset(); err != nil {
		t.Fatal(err)
	}
	res, _ := s.Push(ctx, engine.Frame{Image: img})
	fl, _ := s.Flush(ctx)
	if len(res) != 0 || len(fl) != 1 || fl[0].PoseEnc != s.Reference(0).PoseEnc {
		t.Errorf("after Reset: push gave %d, flush gave %d results", len(res), len(fl))
	}
}
