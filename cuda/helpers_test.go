//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/cpu"
)

// The GPU backends are created once for the package: a context costs a few
// hundred milliseconds and every test compares against the same CPU oracle.
type fixtures struct {
	cpu             *cpu.Backend
	fp32, bf16, fp8 Backend
}

var fx fixtures

// testConfig is the default configuration in a precision with the test
// run's kernel cache (LINGBOTMAP_CUDA_KERNEL_CACHE) and target: the setting
// cuda.arch, LINGBOTMAP_CUDA_ARCH=sm_80 tests the portable kernels on a
// Hopper GPU (cuda/scripts/run.sh ARCH=sm_80).
func testConfig(p Precision) Config {
	cfg := DefaultConfig()
	cfg.Precision = p
	cfg.CacheDir = os.Getenv("LINGBOTMAP_CUDA_KERNEL_CACHE")
	if a := os.Getenv("LINGBOTMAP_CUDA_ARCH"); a != "" {
		cfg.Arch = a
	}
	return cfg
}

func TestMain(m *testing.M) {
	var err error
	fx.cpu = cpu.New(cpu.Config{})
	if fx.fp32, err = New(testConfig(FP32)); err != nil {
		fmt.Fprintln(os.Stderr, "cuda tests need a GPU:", err)
		os.Exit(1)
	}
	if fx.bf16, err = New(testConfig(BF16)); err != nil {
		fmt.Fprintln(os.Stderr, "cuda tests need a GPU:", err)
		os.Exit(1)
	}
	if fx.fp8, err = New(testConfig(FP8)); err != nil {
		fmt.Fprintln(os.Stderr, "cuda tests need a GPU:", err)
		os.Exit(1)
	}
	code := m.Run()
	fx.fp32.Close()
	fx.bf16.Close()
	fx.fp8.Close()
	os.Exit(code)
}

// Tolerances on ‖got−want‖/‖want‖ by precision.
const (
	tolFP32 = 2e-5
	tolBF16 = 1e-2
	tolTF32 = 2e-3
)

// pair runs one operation on the CPU oracle and on a GPU backend.
type pair struct {
	t   testing.TB
	gpu Backend
	tol float64
	rng *rand.Rand
}

func pairs(t testing.TB, seed uint64) []pair {
	return []pair{
		{t: t, gpu: fx.fp32, tol: tolFP32, rng: rand.New(rand.NewPCG(seed, 1))},
		{t: t, gpu: fx.bf16, tol: tolBF16, rng: rand.New(rand.NewPCG(seed, 2))},
	}
}

func (p pair) name() string {
	switch p.gpu {
	case fx.fp32:
		return "fp32"
	case fx.fp8:
		return "fp8"
	}
	return "bf16"
}

func (p pair) randn(n int, scale float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(p.rng.NormFloat64() * scale)
	}
	return out
}

// in uploads the same values to both backends.
func (p pair) in(data []float32, shape ...int) (backend.Tensor, backend.Tensor) {
	return fx.cpu.FromHost(data, shape...), p.gpu.FromHost(data, shape...)
}

func (p pair) weight(data []float32, prec backend.Precision, shape ...int) (backend.Tensor, backend.Tensor) {
	return fx.cpu.Weight("w", data, prec, shape...), p.gpu.Weight("w", data, prec, shape...)
}

// weightAsStored is weight, but the CPU's copy of a head matrix holds what
// the GPU backend stores of it: its values rounded to bf16 where the backend
// keeps the camera head's matrices in bf16 (Config.CameraHeadBF16, on by
// default in BF16 and FP8 mode), so that a head op compares at fp32's
// tolerance.
func (p pair) weightAsStored(data []float32, prec backend.Precision, shape ...int) (backend.Tensor, backend.Tensor) {
	if prec == backend.Head && p.gpu.(*gpu).headBF16 && headBF16Matrix(shape) {
		return fx.cpu.Weight("w", roundedBF16(data), prec, shape...), p.gpu.Weight("w", data, prec, shape...)
	}
	return p.weight(data, prec, shape...)
}

// kvStores makes the same KV store on the CPU and on the GPU.
func (p pair) kvStores(spec backend.KVSpec) (backend.KVStore, backend.KVStore) {
	p.t.Helper()
	cs, err := fx.cpu.NewKVStore(spec)
	if err != nil {
		p.t.Fatal(err)
	}
	gs, err := p.gpu.NewKVStore(spec)
	if err != nil {
		p.t.Fatal(err)
	}
	return cs, gs
}

// check compares shapes and values (relative L2 error, NaN never passes).
func (p pair) check(what string, got, want backend.Tensor, tol float64) {
	p.t.Helper()
	if err := p.gpu.Err(); err != nil {
		p.t.Fatalf("%s (%s): device error: %v", what, p.name(), err)
	}
	gs, ws := got.Shape(), want.Shape()
	if fmt.Sprint(gs) != fmt.Sprint(ws) {
		p.t.Fatalf("%s (%s): shape %v, want %v", what, p.name(), gs, ws)
	}
	g, w := p.gpu.ToHost(got), fx.cpu.ToHost(want)
	rel, worst := relErr(g, w)
	if !(rel <= tol) {
		p.t.Errorf("%s (%s): relative error %.3g > %.3g (worst element %d: got %g want %g)", what, p.name(), rel, tol, worst, g[worst], w[worst])
	}
	p.gpu.Free(got)
	fx.cpu.Free(want)
}

// equalBits says whether a and b hold the same float32 values bit for bit.
func equalBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// relErr is ‖g−w‖/‖w‖ and the index of the largest difference.
func relErr(g, w []float32) (float64, int) {
	var num, den, big float64
	worst := 0
	for i := range w {
		d := float64(g[i]) - float64(w[i])
		if math.IsNaN(d) {
			return math.NaN(), i
		}
		num += d * d
		den += float64(w[i]) * float64(w[i])
		if math.Abs(d) > big {
			big, worst = math.Abs(d), i
		}
	}
	if den == 0 {
		return math.Sqrt(num), worst
	}
	return math.Sqrt(num / den), worst
}

// checkBF16Copy checks whether x carries the bf16 copy that a bf16 GEMM or
// attention reads instead of casting x (want), and that such a copy holds
// exactly x's values rounded to the nearest bf16.
func checkBF16Copy(p pair, what string, x backend.Tensor, want bool) {
	p.t.Helper()
	c := x.(*Tensor)
	if got := c.buf.bf != nil; got != want {
		p.t.Errorf("%s (%s): has a bf16 copy: %v, want %v", what, p.name(), got, want)
		return
	}
	if !want {
		return
	}
	vals := p.gpu.ToHost(x)
	if len(vals) == 0 {
		return
	}
	raw := make([]uint16, len(vals))
	if err := p.gpu.(*gpu).own.do(func() error {
		return cu.MemcpyDtoH(unsafe.Pointer(&raw[0]), c.buf.bf.ptr, int64(len(raw))*2)
	}); err != nil {
		p.t.Fatalf("%s: reading the bf16 copy: %v", what, err)
	}
	for i, v := range vals {
		u := math.Float32bits(v)
		if r := uint16((u + 0x7fff + (u>>16)&1) >> 16); raw[i] != r {
			p.t.Errorf("%s (%s): bf16 copy element %d is %#04x, want %#04x (%g rounded)", what, p.name(), i, raw[i], r, v)
			return
		}
	}
}
