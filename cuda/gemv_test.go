//go:build cuda

package cuda

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/cpu"
)

// roundBF16 is v rounded to the nearest bf16, as the camera head's matrices
// are stored with Config.CameraHeadBF16.
func roundBF16(v float32) float32 { return math.Float32frombits(uint32(bf16Bits(v)) << 16) }

func roundedBF16(data []float32) []float32 {
	out := make([]float32, len(data))
	for i, v := range data {
		out[i] = roundBF16(v)
	}
	return out
}

// newHeadBF16 is a backend of precision p with Config.CameraHeadBF16 on;
// the caller closes it.
func newHeadBF16(t *testing.T, p Precision) *gpu {
	t.Helper()
	cfg := testConfig(p)
	cfg.CameraHeadBF16 = true
	be, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return be.(*gpu)
}

// TestCameraHeadBF16Weights: with the setting, BF16 and FP8 backends keep a
// head matrix whose rows are whole 16-byte vectors as bf16 only (exactly
// its values rounded to nearest even, no fp32 bytes); a 9-wide matrix,
// biases and every parameter of an FP32 backend stay fp32; an op other
// than a GEMM that reads such a matrix gets the rounded values back.
func TestCameraHeadBF16Weights(t *testing.T) {
	for _, p := range []Precision{BF16, FP8, FP32} {
		checkHeadBF16Weights(t, p)
	}
}

func checkHeadBF16Weights(t *testing.T, p Precision) {
	g := newHeadBF16(t, p)
	defer g.Close()
	if want := p != FP32; g.headBF16 != want {
		t.Fatalf("%s: camera head in bf16: %v, want %v", p, g.headBF16, want)
	}
	rng := pairs(t, 90)[0]
	const rows, cols = 96, 2048
	data := rng.randn(rows*cols, 0.05)
	data[3] = float32(math.Inf(1))
	before := g.MemStats()
	w := g.Weight("w", data, backend.Head, rows, cols)
	after := g.MemStats()
	bfBytes, f32Bytes := after.WeightsBF16-before.WeightsBF16, after.Weights-before.Weights
	if p == FP32 {
		if bfBytes != 0 || f32Bytes != sizeClass(rows*cols*4) {
			t.Errorf("fp32: a head matrix took %d bf16 and %d fp32 bytes, want 0 and %d", bfBytes, f32Bytes, sizeClass(rows*cols*4))
		}
		g.Free(w)
		return
	}
	if bfBytes != sizeClass(rows*cols*2) || f32Bytes != 0 {
		t.Errorf("%s: a head matrix took %d bf16 and %d fp32 bytes, want %d and 0", p, bfBytes, f32Bytes, sizeClass(rows*cols*2))
	}
	c := w.(*Tensor)
	raw := make([]uint16, len(data))
	if err := g.own.do(func() error {
		return cu.MemcpyDtoH(unsafe.Pointer(&raw[0]), c.buf.bf.ptr, int64(len(raw))*2)
	}); err != nil {
		t.Fatal(err)
	}
	for i, v := range data {
		if raw[i] != bf16Bits(v) {
			t.Fatalf("%s: stored element %d is %#04x, want %#04x (%g rounded)", p, i, raw[i], bf16Bits(v), v)
		}
	}
	got := g.ToHost(w) // restores an fp32 copy
	for i, v := range data {
		if math.Float32bits(got[i]) != math.Float32bits(roundBF16(v)) {
			t.Fatalf("%s: restored element %d = %g, want %g", p, i, got[i], roundBF16(v))
		}
	}
	g.Free(w)
	mid := g.MemStats()
	for _, s := range [][]int{{2048, 9}, {2048}, {1, 9}} {
		v := g.Weight("v", rng.randn(backend.Numel(s), 1), backend.Head, s...)
		if d := g.MemStats().WeightsBF16 - mid.WeightsBF16; d != 0 {
			t.Errorf("%s: a head parameter %v took %d bf16 bytes, want it in fp32", p, s, d)
		}
		g.Free(v)
	}
	if err := g.Err(); err != nil {
		t.Fatal(err)
	}
}

// gemvCase is x [lead..., k] through a head matrix w [m, k].
type gemvCase struct {
	lead []int
	k, m int
}

// TestGEMVBF16: Linear (with and without bias, with GELU) and LinearAdd on
// head matrices kept in bf16 match the CPU's fp32 arithmetic on the same
// bf16-rounded weights, up to the order of the sums: every block-row size
// (1, 2, 4 and 8 rows, several blocks of 8, a partial last one), outputs
// that do not fill a block, the camera head's own shapes, a 3-D x, and an x
// that is not 16-byte aligned.
func TestGEMVBF16(t *testing.T) {
	g := newHeadBF16(t, BF16)
	defer g.Close()
	p := pair{t: t, gpu: g, tol: tolFP32, rng: pairs(t, 91)[0].rng}
	var cases []gemvCase
	for _, rows := range []int{1, 2, 3, 5, 8, 9, 17} {
		cases = append(cases, gemvCase{[]int{rows}, 8, 1}, gemvCase{[]int{rows}, 24, 13}, gemvCase{[]int{rows}, 264, 77},
			gemvCase{[]int{rows}, 1024, 9})
	}
	cases = append(cases, gemvCase{[]int{2, 3}, 128, 40})
	for _, rows := range []int{1, 8} { // the camera head: modulation, qkv, proj, fc1, fc2, pose branch
		for _, km := range [][2]int{{2048, 6144}, {2048, 2048}, {2048, 8192}, {8192, 2048}, {2048, 1024}} {
			cases = append(cases, gemvCase{[]int{rows}, km[0], km[1]})
		}
	}
	for _, c := range cases {
		rows := backend.Numel(c.lead)
		xs := append(slices.Clone(c.lead), c.k)
		rs := append(slices.Clone(c.lead), c.m)
		w := p.randn(c.m*c.k, 1/math.Sqrt(float64(c.k)))
		b := p.randn(c.m, 0.5)
		cw := fx.cpu.Weight("w", roundedBF16(w), backend.Head, c.m, c.k)
		cb := fx.cpu.Weight("b", b, backend.Head, c.m)
		gw := g.Weight("w", w, backend.Head, c.m, c.k)
		gb := g.Weight("b", b, backend.Head, c.m)
		if !gw.(*Tensor).buf.headBF {
			t.Fatalf("%v: the head matrix is not kept in bf16", c)
		}
		cx, gx := p.in(p.randn(rows*c.k, 1), xs...)
		cr, gr := p.in(p.randn(rows*c.m, 1), rs...)
		what := fmt.Sprintf("%v×%d→%d", c.lead, c.k, c.m)
		for _, act := range []backend.Activation{backend.ActNone, backend.ActGELU} {
			p.check(fmt.Sprintf("Linear %s act %d", what, act), g.Linear(gx, gw, gb, act), fx.cpu.Linear(cx, cw, cb, act), p.tol)
		}
		p.check("Linear without bias "+what, g.Linear(gx, gw, nil, backend.ActNone), fx.cpu.Linear(cx, cw, nil, backend.ActNone), p.tol)
		p.check("LinearAdd "+what, g.LinearAdd(gx, gw, gb, gr), fx.cpu.LinearAdd(cx, cw, cb, cr), p.tol)
		p.check("LinearAdd without bias "+what, g.LinearAdd(gx, gw, nil, gr), fx.cpu.LinearAdd(cx, cw, nil, cr), p.tol)
		p.check("LinearAdd "+what+": r afterwards", gr, cr, 0)
		for _, v := range []backend.Tensor{gx, gw, gb} {
			g.Free(v)
		}
	}

	checkNormGEMV(t, p, g)

	// x one float past an aligned address: the kernels read 16-byte
	// vectors, so it is copied to aligned memory first.
	const rows, k, m = 3, 64, 24
	x := p.randn(rows*k, 1)
	w := p.randn(m*k, 0.1)
	gw := g.Weight("w", w, backend.Head, m, k)
	base := g.FromHost(append([]float32{0}, x...), rows*k+1).(*Tensor)
	shifted := &Tensor{buf: &buffer{ptr: base.ptr() + 4, live: true}, shape: []int{rows, k}}
	if aligned(16, shifted.ptr()) {
		t.Fatal("the shifted x is aligned")
	}
	want := fx.cpu.Linear(fx.cpu.FromHost(x, rows, k), fx.cpu.Weight("w", roundedBF16(w), backend.Head, m, k), nil, backend.ActNone)
	p.check("Linear on an unaligned x", g.Linear(shifted, gw, nil, backend.ActNone), want, p.tol)
	g.Free(base)
	g.Free(gw)
}

// checkNormGEMV: NormLinear on head matrices kept in bf16 matches the CPU's
// LayerNorm and Linear on the same bf16-rounded weights, with the LayerNorm
// inside the GEMV (Config.CameraHeadFuseNorm: each block normalises its
// rows, up to 4 rows at the head's width, with and without the affine
// parameters) and apart (more rows than fit a block's shared memory, and
// the setting off).
func checkNormGEMV(t *testing.T, p pair, g *gpu) {
	t.Helper()
	off := newHeadBF16(t, BF16)
	defer off.Close()
	off.cfg.CameraHeadFuseNorm = false
	for _, c := range []gemvCase{{[]int{1}, 2048, 6144}, {[]int{1}, 2048, 1024}, {[]int{2}, 2048, 40}, {[]int{3}, 2048, 8192},
		{[]int{5}, 2048, 24}, {[]int{8}, 264, 33}, {[]int{17}, 64, 9}, {[]int{1}, 8, 3}} {
		rows := backend.Numel(c.lead)
		x := p.randn(rows*c.k, 1)
		for i := range x {
			x[i] += 0.5 // a mean to take out
		}
		w := p.randn(c.m*c.k, 1/math.Sqrt(float64(c.k)))
		b := p.randn(c.m, 0.5)
		nw := p.randn(c.k, 0.3)
		nb := p.randn(c.k, 0.1)
		cx := fx.cpu.FromHost(x, rows, c.k)
		cw, cb := fx.cpu.Weight("w", roundedBF16(w), backend.Head, c.m, c.k), fx.cpu.Weight("b", b, backend.Head, c.m)
		cnw, cnb := fx.cpu.Weight("nw", nw, backend.Head, c.k), fx.cpu.Weight("nb", nb, backend.Head, c.k)
		for _, gg := range []*gpu{g, off} {
			q := pair{t: t, gpu: gg, tol: p.tol, rng: p.rng}
			gx := gg.FromHost(x, rows, c.k)
			gw, gb := gg.Weight("w", w, backend.Head, c.m, c.k), gg.Weight("b", b, backend.Head, c.m)
			gnw, gnb := gg.Weight("nw", nw, backend.Head, c.k), gg.Weight("nb", nb, backend.Head, c.k)
			what := fmt.Sprintf("NormLinear %v×%d→%d (fuse_norm %v)", c.lead, c.k, c.m, gg.cfg.CameraHeadFuseNorm)
			for _, act := range []backend.Activation{backend.ActNone, backend.ActGELU} {
				q.check(fmt.Sprintf("%s act %d", what, act), gg.NormLinear(gx, gnw, gnb, 1e-5, gw, gb, act),
					fx.cpu.NormLinear(cx, cnw, cnb, 1e-5, cw, cb, act), q.tol)
			}
			q.check(what+" without affine or bias", gg.NormLinear(gx, nil, nil, 1e-6, gw, nil, backend.ActNone),
				fx.cpu.NormLinear(cx, nil, nil, 1e-6, cw, nil, backend.ActNone), q.tol)
			for _, v := range []backend.Tensor{gx, gw, gb, gnw, gnb} {
				gg.Free(v)
			}
		}
	}
	// Which kernels ran: the normalising GEMVs for up to 4 rows with the
	// setting, none without it.
	for _, c := range []struct {
		g    *gpu
		name string
		want bool
	}{{g, "gemv_norm_bf16_r1", true}, {g, "gemv_norm_bf16_r4", true}, {g, "gemv_norm_bf16_r8", true}, {off, "gemv_norm_bf16_r1", false}} {
		var loaded bool
		_ = c.g.own.do(func() error { _, loaded = c.g.kernels.funcs["gemv."+c.name]; return nil })
		if loaded != c.want {
			t.Errorf("fuse_norm %v: kernel %s ran: %v, want %v", c.g.cfg.CameraHeadFuseNorm, c.name, loaded, c.want)
		}
	}
}

// headRoundingCPU is the CPU backend with the head matrices that
// Config.CameraHeadBF16 keeps in bf16 rounded the same way: the oracle for
// a model whose only bf16 part is the camera head.
type headRoundingCPU struct{ *cpu.Backend }

func (b headRoundingCPU) Weight(name string, data []float32, prec backend.Precision, shape ...int) backend.Tensor {
	if prec == backend.Head && headBF16Matrix(shape) {
		data = roundedBF16(data)
	}
	return b.Backend.Weight(name, data, prec, shape...)
}

// streamResults runs a golden case on the engine with a backend from f;
// atEnd, when set, runs before the stream (and its backend) closes.
func streamResults(t *testing.T, cfg engine.Config, frames []engine.Frame, f engine.BackendFactory, atEnd func()) []engine.Result {
	t.Helper()
	st, err := engine.New(context.Background(), cfg, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := pushAll(t, st, frames, true)
	if atEnd != nil {
		atEnd()
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if len(res) == 0 {
		t.Fatal("no results")
	}
	return res
}

// poseEncodings joins the results' pose encodings.
func poseEncodings(res []engine.Result) []float32 {
	var out []float32
	for _, r := range res {
		out = append(out, r.PoseEnc[:]...)
	}
	return out
}

// poseDiff is relDiff of two runs' pose encodings, which must be as many.
func poseDiff(t *testing.T, got, want []float32) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d pose values, want %d", len(got), len(want))
	}
	return relDiff(got, want)
}

// TestCameraHeadBF16Stream: the whole camera head with its matrices in bf16,
// on golden streams (a phase 1 of 3 scale frames, keyframes by flow, so
// non-keyframes that only attend), against the CPU.
//   - Exact rounding: an FP32 backend made to keep the head's matrices in
//     bf16 (the setting itself applies to BF16 and FP8 only) against the
//     CPU with the same matrices rounded: everything but the order of the
//     sums is the same arithmetic, so the poses agree to fp32 tolerance.
//   - The setting: BF16 with camera_head_bf16 (its LayerNorms inside the
//     GEMVs or apart) against the CPU's fp32 model within verify's bf16
//     pose tolerance (streaming); it keeps less fp32 weight memory than
//     without, and CUDA graphs replay its kernels bit for bit.
func TestCameraHeadBF16Stream(t *testing.T) {
	// bf16's pose differences may flip a keyframe choice by flow (which
	// follows the poses), and then the streams part ways: bf16 is held to
	// the CPU in streaming mode only (verify checks flow mode with the
	// golden case's own allowances).
	modes := []struct {
		name, golden string
		set          func(*engine.Config)
		bf16VsCPU    bool
	}{
		{"streaming", "stream_kf1", func(*engine.Config) {}, true},
		{"flow keyframes", "stream_flow", func(c *engine.Config) { c.FlowThreshold = 14 }, false},
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			frames := goldenFrames(t, mode.golden)
			cpuCfg := goldenEngineConfig(t, "fp32")
			cpuCfg.Device = "cpu"
			mode.set(&cpuCfg)
			rounded := poseEncodings(streamResults(t, cpuCfg, frames, func(engine.Config) (backend.Backend, error) {
				return headRoundingCPU{cpu.New(cpu.Config{})}, nil
			}, nil))
			exact := poseEncodings(streamResults(t, cpuCfg, frames, func(engine.Config) (backend.Backend, error) {
				return cpu.New(cpu.Config{}), nil
			}, nil))

			cfg := goldenEngineConfig(t, "fp32")
			mode.set(&cfg)
			var g *gpu
			forced := poseEncodings(streamResults(t, cfg, frames, func(c engine.Config) (backend.Backend, error) {
				be, err := keptFactory(func(*Config) {}, &g)(c)
				if err == nil {
					g.headBF16 = true // before the model loads its weights
				}
				return be, err
			}, nil))
			if e := poseDiff(t, forced, rounded); !(e <= 1e-4) {
				t.Errorf("fp32 with the head's matrices in bf16: pose encodings %.3g from the CPU's with the same rounding, want ≤ 1e-4", e)
			}
			t.Logf("fp32 with the head's matrices in bf16: %.3g from the CPU with the same rounding, %.3g from the CPU in fp32",
				poseDiff(t, forced, rounded), poseDiff(t, forced, exact))

			cfg = goldenEngineConfig(t, "bf16")
			mode.set(&cfg)
			run := func(on, fuse, graphs bool) ([]float32, MemStats) {
				var g *gpu
				var mem MemStats
				res := streamResults(t, cfg, frames, keptFactory(func(c *Config) {
					c.CameraHeadBF16, c.CameraHeadFuseNorm, c.Graphs, c.FixedGEMMAlgo = on, fuse, graphs, true
				}, &g), func() { mem = g.MemStats() })
				return poseEncodings(res), mem
			}
			off, offMem := run(false, true, true)
			on, onMem := run(true, true, true)
			direct, _ := run(true, true, false)
			apart, _ := run(true, false, true)
			if mode.bf16VsCPU {
				for _, c := range []struct {
					name string
					pose []float32
				}{{"camera_head_bf16", on}, {"camera_head_bf16 without camera_head_fuse_norm", apart}} {
					if e := poseDiff(t, c.pose, exact); !(e <= 2e-2) {
						t.Errorf("bf16 with %s: pose encodings %.3g from the CPU's fp32, want ≤ 2e-2 (verify's bf16 tolerance)", c.name, e)
					}
				}
				t.Logf("bf16: pose encodings from the CPU's fp32 %.3g with camera_head_bf16 (%.3g with its norms apart), %.3g without",
					poseDiff(t, on, exact), poseDiff(t, apart, exact), poseDiff(t, off, exact))
			}
			if !(onMem.Weights < offMem.Weights && onMem.WeightsBF16 > offMem.WeightsBF16 && onMem.Weights+onMem.WeightsBF16 < offMem.Weights+offMem.WeightsBF16) {
				t.Errorf("weights with camera_head_bf16: %d fp32 + %d bf16 bytes, without: %d + %d; want fewer fp32 and fewer in all",
					onMem.Weights, onMem.WeightsBF16, offMem.Weights, offMem.WeightsBF16)
			}
			if !equalBits(on, direct) {
				t.Errorf("camera_head_bf16: pose encodings differ with CUDA graphs (relative %.3g)", poseDiff(t, on, direct))
			}
		})
	}
}

// BenchmarkCameraHeadGEMV times the camera head's linears on one token
// (modulation and qkv, proj, fc1, fc2, the pose branch's fc1) as they run
// without the setting (fp32 weights through cuBLASLt) and with it (bf16
// weights through the GEMV kernels), and reports the weights' bytes read a
// second. Each call reads another copy of the matrix, 256 MiB of copies
// in all, so that the weights come from memory as in a frame and not from
// the L2 cache.
func BenchmarkCameraHeadGEMV(b *testing.B) {
	headBF, err := New(func() Config { c := testConfig(BF16); c.CameraHeadBF16 = true; return c }())
	if err != nil {
		b.Fatal(err)
	}
	defer headBF.Close()
	p := pairs(b, 92)[1]
	for _, km := range [][2]int{{2048, 6144}, {2048, 2048}, {2048, 8192}, {8192, 2048}, {2048, 1024}} {
		k, m := km[0], km[1]
		for _, mode := range []struct {
			name  string
			g     Backend
			bytes int
		}{{"fp32", fx.bf16, 4}, {"bf16", headBF, 2}} {
			b.Run(fmt.Sprintf("%s_K%d_M%d", mode.name, k, m), func(b *testing.B) {
				g := mode.g
				size := m * k * mode.bytes
				ws := make([]backend.Tensor, max(1, (256<<20+size-1)/size))
				data := p.randn(m*k, 0.02)
				for i := range ws {
					ws[i] = g.Weight("w", data, backend.Head, m, k)
				}
				bias := g.Weight("b", p.randn(m, 0.1), backend.Head, m)
				x := g.FromHost(p.randn(k, 1), 1, k)
				for _, w := range ws {
					g.Free(g.Linear(x, w, bias, backend.ActNone))
				}
				waitGPU(b, g)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					g.Free(g.Linear(x, ws[i%len(ws)], bias, backend.ActNone))
				}
				waitGPU(b, g)
				b.ReportMetric(float64(size)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
				for _, w := range append(ws, bias, x) {
					g.Free(w)
				}
			})
		}
	}
}
