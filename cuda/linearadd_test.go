//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// linearAddCase is x [lead..., k] through w [m, k] onto r [lead..., m].
type linearAddCase struct {
	lead []int
	k, m int
}

func (c linearAddCase) String() string { return fmt.Sprintf("%v×%d→%d", c.lead, c.k, c.m) }

// withTuning runs fn with GEMM autotuning on for g, so that each new
// accumulating shape's first call times its candidates on the real output.
func withTuning(t *testing.T, g Backend, fn func()) {
	t.Helper()
	gg := g.(*gpu)
	var saved bool
	if err := gg.own.do(func() error { saved, gg.lt.autotune = gg.lt.autotune, true; return nil }); err != nil {
		t.Fatal(err)
	}
	defer gg.own.do(func() error { gg.lt.autotune = saved; return nil })
	fn()
}

// checkLinearAdd compares LinearAdd with the CPU twice (the first call of a
// shape plans and tunes, the second reuses the plan) and checks that r is
// left as it was.
func checkLinearAdd(p pair, c linearAddCase, prec backend.Precision, withBias bool) {
	p.t.Helper()
	if c.k == 1 && p.name() == "bf16" && prec == backend.Trunk {
		// One product of bf16-rounded operands added to r: the sum may
		// cancel, so its relative error is not bounded by the bf16 tolerance.
		return
	}
	rows := backend.Numel(c.lead)
	xs := append(append([]int(nil), c.lead...), c.k)
	rs := append(append([]int(nil), c.lead...), c.m)
	x := p.randn(rows*c.k, 1)
	r := p.randn(rows*c.m, 1)
	cx, gx := p.in(x, xs...)
	cr, gr := p.in(r, rs...)
	cw, gw := p.weightAsStored(p.randn(c.m*c.k, 1/math.Sqrt(float64(c.k))), prec, c.m, c.k)
	var cb, gb backend.Tensor
	if withBias {
		cb, gb = p.weight(p.randn(c.m, 0.5), prec, c.m)
	}
	tol := p.tol
	if prec == backend.Head {
		tol = tolFP32 // fp32 arithmetic on the head's weights as stored
	}
	what := fmt.Sprintf("LinearAdd %v prec %d bias %v", c, prec, withBias)
	for _, call := range []string{"first call", "second call"} {
		p.check(what+", "+call, p.gpu.LinearAdd(gx, gw, gb, gr), fx.cpu.LinearAdd(cx, cw, cb, cr), tol)
	}
	p.check(what+": r afterwards", gr, cr, 0)
	for _, v := range []backend.Tensor{gx, gw, gb} {
		if v != nil {
			p.gpu.Free(v)
		}
	}
}

func TestLinearAdd(t *testing.T) {
	cases := []linearAddCase{
		{[]int{1}, 1, 1},
		{[]int{7}, 33, 65},
		{[]int{37}, 100, 72},
		{[]int{3, 37}, 100, 72}, // 3-D x
		{[]int{2, 5, 9}, 16, 24},
		{[]int{1005}, 1024, 1024}, // attn.proj of one frame
		{[]int{1005}, 4096, 1024}, // mlp.fc2 of one frame
		{[]int{1, 1005}, 1024, 4096},
	}
	for _, p := range pairs(t, 41) {
		withTuning(t, p.gpu, func() {
			for _, c := range cases {
				for _, prec := range []backend.Precision{backend.Trunk, backend.Head} {
					for _, withBias := range []bool{true, false} {
						checkLinearAdd(p, c, prec, withBias)
					}
				}
			}
		})
	}
}

// TestLinearAddFallback takes away every accumulating plan of one shape, as
// if cuBLASLt offered none, so that LinearAdd runs the plain GEMM and then
// the add kernel.
func TestLinearAddFallback(t *testing.T) {
	c := linearAddCase{[]int{37}, 100, 72}
	for _, p := range pairs(t, 42) {
		gg := p.gpu.(*gpu)
		checkLinearAdd(p, c, backend.Trunk, true) // plans the shape
		var keys []gemmKey
		err := gg.own.do(func() error {
			for k := range gg.lt.plans {
				if k.accumulate && k.m == c.m && k.n == backend.Numel(c.lead) && k.k == c.k {
					keys = append(keys, k)
				}
			}
			gg.lt.forget()
			for _, k := range keys {
				for _, bias := range []bool{false, true} {
					for al := uint32(1); al <= 256; al *= 2 {
						k.bias, k.align = bias, al
						gg.lt.plans[k] = nil // planned, no algorithm
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 {
			t.Fatalf("%s: LinearAdd %v planned no accumulating GEMM", p.name(), c)
		}
		for _, withBias := range []bool{true, false} {
			checkLinearAdd(p, c, backend.Trunk, withBias)
		}
		// Had any call planned an accumulating GEMM after all, it would not
		// have tested the fallback.
		var planned []gemmKey
		err = gg.own.do(func() error {
			for k, pl := range gg.lt.plans {
				if k.accumulate && pl != nil && k.m == c.m && k.n == backend.Numel(c.lead) && k.k == c.k {
					planned = append(planned, k)
				}
			}
			gg.lt.forget()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(planned) > 0 {
			t.Errorf("%s: LinearAdd %v planned accumulating GEMMs %+v instead of falling back", p.name(), c, planned)
		}
	}
}

// An accumulating GEMM in place would add C once per run (tuning runs each
// candidate several times), so matmul refuses C = D.
func TestAccumulatingGemmRefusesInPlace(t *testing.T) {
	g := fx.fp32
	gg := g.(*gpu)
	a := g.FromHost(make([]float32, 8*8), 8, 8).(*Tensor)
	d := g.FromHost(make([]float32, 8*8), 8, 8).(*Tensor)
	key := gemmKey{m: 8, n: 8, k: 8, lda: 8, ldb: 8, ldc: 8}
	var ok bool
	err := gg.own.do(func() error {
		var err error
		ok, err = gg.lt.matmul(key, a.ptr(), a.ptr(), d.ptr(), d.ptr(), 0)
		return err
	})
	if err == nil || ok {
		t.Fatalf("matmul with C = D: ok %v, error %v; want an error", ok, err)
	}
	g.Free(a)
	g.Free(d)
}
