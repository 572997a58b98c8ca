//go:build cuda

package cuda

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/geom"
	goldencase "github.com/lingbotmap/lingbotmap/engine/golden"
	"github.com/lingbotmap/lingbotmap/engine/golden/goldentest"
	"github.com/lingbotmap/lingbotmap/engine/mapio"
)

// The device's points against geom.ConfidentPoints, the CPU reference: the
// kernel computes in double, rounded at every step as Go does, so the
// coordinates are expected bit for bit; the bound is float32 against
// float64 all the same.
const tolPoints = 1e-5

// samePoints fails unless got and want have the same points in the same
// order with the same colours, coordinates within tolPoints of the point's
// norm; it returns how many coordinates differ at all.
func samePoints(t *testing.T, what string, got, want []geom.Point) int {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d points, the CPU reference %d", what, len(got), len(want))
	}
	differ := 0
	for i, w := range want {
		g := got[i]
		if g.R != w.R || g.G != w.G || g.B != w.B {
			t.Fatalf("%s: point %d has colour %d,%d,%d, the CPU reference %d,%d,%d (another pixel)", what, i, g.R, g.G, g.B, w.R, w.G, w.B)
		}
		norm := math.Sqrt(float64(w.X)*float64(w.X) + float64(w.Y)*float64(w.Y) + float64(w.Z)*float64(w.Z))
		for c, d := range [3][2]float32{{g.X, w.X}, {g.Y, w.Y}, {g.Z, w.Z}} {
			if d[0] != d[1] {
				differ++
			}
			if math.Abs(float64(d[0])-float64(d[1])) > tolPoints*norm {
				t.Fatalf("%s: point %d coordinate %d is %g, the CPU reference %g", what, i, c, d[0], d[1])
			}
		}
	}
	return differ
}

// unprojectCase is one frame for the kernel.
type unprojectCase struct {
	name        string
	w, h        int
	depth, conf []float32
	k           geom.Intrinsics
	pose        geom.Mat4
}

// syntheticCase is a w×h frame of smooth positive depths with the values a
// filter must refuse sprinkled in (NaN, ±Inf, zero, negative, one large
// enough that its point overflows float32), and confidences on a grid of
// steps that puts many exactly at the thresholds the test uses.
func syntheticCase(w, h int, seed uint64) unprojectCase {
	rng := rand.New(rand.NewPCG(seed, 3))
	c := unprojectCase{name: fmt.Sprintf("synthetic %d×%d", w, h), w: w, h: h,
		depth: make([]float32, w*h), conf: make([]float32, w*h),
		k: geom.Intrinsics{0.9 * float64(w), 0.85 * float64(w), float64(w) / 2, float64(h) / 2}}
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, -0.5, 3e38}
	for i := range c.depth {
		c.depth[i] = float32(0.5 + 3*rng.Float64())
		if rng.IntN(9) == 0 {
			c.depth[i] = bad[rng.IntN(len(bad))]
		}
		c.conf[i] = 1 + 0.25*float32(rng.IntN(9)) // 1, 1.25, …, 3
		if rng.IntN(50) == 0 {
			c.conf[i] = float32(math.NaN())
		}
	}
	// a random rotation (QuatToMat normalises) and translation
	q := geom.Quat{rng.NormFloat64(), rng.NormFloat64(), rng.NormFloat64(), 1 + rng.Float64()}
	r, err := geom.QuatToMat(q)
	if err != nil {
		panic(err) // w ≥ 1: never degenerate
	}
	c.pose = geom.Rigid(r, [3]float64{rng.NormFloat64(), rng.NormFloat64(), 5 * rng.NormFloat64()})
	return c
}

// goldenCases are the frames of a golden case: the tiny model's real
// depths, confidences and poses.
func goldenCases(t *testing.T, name string) []unprojectCase {
	out := goldentest.Open(t, name, goldencase.OutputsFile)
	depth, dshape, err := goldencase.Tensor(out, "depth")
	if err != nil {
		t.Fatal(err)
	}
	conf, _, err := goldencase.Tensor(out, "depth_conf")
	if err != nil {
		t.Fatal(err)
	}
	pe, _, err := goldencase.Tensor(out, "pose_enc")
	if err != nil {
		t.Fatal(err)
	}
	// the reference's depth is [B, S, H, W, 1]: drop the trailing unit axis
	for len(dshape) > 2 && dshape[len(dshape)-1] == 1 {
		dshape = dshape[:len(dshape)-1]
	}
	h, w := dshape[len(dshape)-2], dshape[len(dshape)-1]
	n := w * h
	frames := len(depth) / n
	if len(pe) != 9*frames || len(conf) != len(depth) {
		t.Fatalf("golden %s: %d depth frames of %d×%d, %d pose encodings, %d confidences", name, frames, w, h, len(pe)/9, len(conf))
	}
	var cs []unprojectCase
	for f := 0; f < frames; f += 5 {
		var enc [9]float32
		copy(enc[:], pe[9*f:9*f+9])
		cs = append(cs, unprojectCase{name: fmt.Sprintf("%s frame %d", name, f), w: w, h: h,
			depth: depth[f*n : (f+1)*n], conf: conf[f*n : (f+1)*n],
			k: geom.IntrinsicsFromPoseEnc(enc, w, h), pose: geom.PoseEncToCamToWorld(enc)})
	}
	return cs
}

// TestUnprojectMatchesConfidentPoints runs real model outputs and synthetic
// frames with every kind of bad value, at odd sizes, sizes around the
// kernel's block of 256 pixels and a camera-sized one, through the kernel
// at strides 1 and 3, thresholds that many confidences equal, and depth
// scales 1 and 1.37 (a window's similarity), and compares with
// geom.ConfidentPoints on the same values (the depth scaled in float32 on
// the host first): the same points, in the same order, with the same
// colours.
func TestUnprojectMatchesConfidentPoints(t *testing.T) {
	cases := goldenCases(t, "stream_kf1")
	for i, sz := range [][2]int{{37, 23}, {1, 1}, {256, 1}, {257, 1}, {16, 32}, {518, 392}, {3, 700}} {
		cases = append(cases, syntheticCase(sz[0], sz[1], uint64(i)))
	}
	g := fx.fp32
	total, differ := 0, 0
	for _, c := range cases {
		rgb := make([]uint8, 3*c.w*c.h)
		for i := range rgb {
			rgb[i] = uint8(i*7 + i/3)
		}
		depth, conf := g.FromHost(c.depth, c.h, c.w), g.FromHost(c.conf, c.h, c.w)
		for _, filt := range []geom.PointFilter{{ConfThreshold: 1.5, Stride: 1}, {ConfThreshold: 2, Stride: 3}, {ConfThreshold: 3, Stride: 1}, {ConfThreshold: 0.1, Stride: 2}} {
			for _, scale := range []float32{1, 1.37} {
				what := fmt.Sprintf("%s, threshold %g, stride %d, scale %g", c.name, filt.ConfThreshold, filt.Stride, scale)
				xyz, pix, err := g.(backend.Unprojector).Unproject(depth, conf, backend.Unprojection{
					Width: c.w, Height: c.h, Intrinsics: c.k, CamToWorld: c.pose,
					DepthScale: scale, ConfThreshold: filt.ConfThreshold, Stride: filt.Stride,
				})
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				got, err := (&geom.KeptPoints{Filter: filt, XYZ: xyz, Pixel: pix}).Points(nil, rgb)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				scaled := make([]float32, len(c.depth))
				for i, d := range c.depth {
					scaled[i] = d * scale
				}
				want, err := geom.ConfidentPoints(nil, geom.DepthFrame{Width: c.w, Height: c.h, Depth: scaled, Conf: c.conf, RGB: rgb,
					Intrinsics: c.k, CamToWorld: c.pose}, filt)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				differ += samePoints(t, what, got, want)
				total += len(want)
			}
		}
		g.Free(depth)
		g.Free(conf)
	}
	if total == 0 {
		t.Fatal("no point kept in any case: the test compares nothing")
	}
	t.Logf("%d points over %d frames; %d coordinates not bit-equal to the CPU's", total, len(cases), differ)
	if err := g.(backend.ErrorReporter).Err(); err != nil {
		t.Fatal(err)
	}
	// Bad calls are refused without breaking the backend.
	d := g.FromHost(make([]float32, 6), 2, 3)
	defer g.Free(d)
	for _, u := range []backend.Unprojection{
		{Width: 3, Height: 2, Stride: 0, Intrinsics: geom.Intrinsics{1, 1, 0, 0}},
		{Width: 4, Height: 2, Stride: 1, Intrinsics: geom.Intrinsics{1, 1, 0, 0}},
		{Width: 3, Height: 2, Stride: 1, ConfThreshold: math.NaN()},
	} {
		if _, _, err := g.(backend.Unprojector).Unproject(d, d, u); err == nil {
			t.Errorf("%+v accepted", u)
		}
	}
	if err := g.(backend.ErrorReporter).Err(); err != nil {
		t.Fatalf("a refused call broke the backend: %v", err)
	}
}

// TestUnprojectLiveStreamMapsAsHost: a live-window stream on the GPU told
// the map's filter gives every result its points from the device, with the
// final (window-warped) pose and depth; they equal the CPU path's points on
// the same results, and the voxel maps built from each agree.
func TestUnprojectLiveStreamMapsAsHost(t *testing.T) {
	frames := goldenFramesTwice(t, "stream_kf1") // five windows
	cfg := goldenEngineConfig(t, "fp32")
	cfg.Windowed, cfg.WindowMode = true, engine.WindowLive
	st, err := engine.New(context.Background(), cfg, func(engine.Config) (backend.Backend, error) {
		return New(testConfig(FP32))
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	filt := geom.PointFilter{ConfThreshold: 3, Stride: 2}
	if on, err := st.(engine.PointMaker).MakePoints(filt, false); err != nil || !on {
		t.Fatalf("MakePoints on the GPU: %v, %v", on, err)
	}
	res := pushAll(t, st, frames, true)
	if len(res) != len(frames) {
		t.Fatalf("%d results for %d frames", len(res), len(frames))
	}
	dev, err := mapio.NewMap(mapio.MapConfig{VoxelSize: 0.05, Filter: filt})
	if err != nil {
		t.Fatal(err)
	}
	host, _ := mapio.NewMap(dev.Config())
	windows := map[int]bool{}
	for _, r := range res {
		if r.Kept == nil {
			t.Fatalf("frame %d (window %d): no device points", r.Seq, r.Window)
		}
		windows[r.Window] = true
		f := r.DepthFrame()
		got, err := dev.AddPoints(f)
		if err != nil {
			t.Fatal(err)
		}
		f.Kept = nil
		want, err := host.AddPoints(f)
		if err != nil {
			t.Fatal(err)
		}
		samePoints(t, fmt.Sprintf("frame %d window %d", r.Seq, r.Window), got, want)
	}
	if len(windows) < 3 {
		t.Fatalf("results of %d windows: the warp is not exercised", len(windows))
	}
	if kept, hosted := dev.PointFrames(); kept != int64(len(res)) || hosted != 0 {
		t.Fatalf("device map: %d frames from the device, %d from the host", kept, hosted)
	}
	if n := st.Stats().PointsOnDevice; n != int64(len(res)) {
		t.Fatalf("stats: %d frames with device points, want %d", n, len(res))
	}
	a, b := dev.Points(), host.Points()
	samePoints(t, "voxel map", a, b)
	t.Logf("%d frames, %d windows, %d map points", len(res), len(windows), len(a))
}

// BenchmarkUnproject times a camera-sized frame's points on the device,
// the copy of the kept points back included (what the model's thread
// waits for), and reports the maps' bytes read per second.
func BenchmarkUnproject(b *testing.B) {
	c := syntheticCase(518, 392, 9)
	g := fx.fp32
	depth, conf := g.FromHost(c.depth, c.h, c.w), g.FromHost(c.conf, c.h, c.w)
	defer g.Free(depth)
	defer g.Free(conf)
	u := backend.Unprojection{Width: c.w, Height: c.h, Intrinsics: c.k, CamToWorld: c.pose, DepthScale: 1, ConfThreshold: 1.5, Stride: 1}
	var kept int
	for b.Loop() {
		xyz, _, err := g.(backend.Unprojector).Unproject(depth, conf, u)
		if err != nil {
			b.Fatal(err)
		}
		kept = len(xyz) / 3
	}
	b.ReportMetric(float64(2*4*c.w*c.h)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
	b.ReportMetric(float64(kept), "points")
}
