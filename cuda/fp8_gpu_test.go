//go:build cuda

package cuda

import (
	"bytes"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/backend/e4m3"
)

// fp8Pair is the FP8 backend against the CPU oracle.
func fp8Pair(t *testing.T, seed uint64) pair {
	return pair{t: t, gpu: fx.fp8, rng: rand.New(rand.NewPCG(seed, 3))}
}

// quantizeRows rounds each head's 64 values of every row to e4m3 with the
// row's scale (its largest magnitude to 448): Q as the FP8 kernels held it
// before they kept what the rounding missed.
func quantizeRows(x []float32, h, d int) []float32 {
	out := make([]float32, len(x))
	for r := 0; r < len(x)/(h*d); r++ {
		for hd := 0; hd < h; hd++ {
			row := x[(r*h+hd)*d : (r*h+hd+1)*d]
			var amax float32
			for _, v := range row {
				amax = max(amax, float32(math.Abs(float64(v))))
			}
			sq := float32(1)
			if amax > 0 {
				sq = amax / 448
			}
			iq := 1 / sq
			for i, v := range row {
				out[(r*h+hd)*d+i] = e4m3.Value(e4m3.Bits(v*iq)) * sq
			}
		}
	}
	return out
}

// TestPagedAttentionFP8 writes the cases of TestPagedAttention (head dim
// 64) into an FP8 store and checks (1) that the store holds each value
// rounded to e4m3 at its power-of-two scale (ExportKV dequantizes, V read
// back through its transposed, permuted layout), and (2) the FP8 kernel
// against the CPU's exact attention over those stored values and the
// unrounded Q, so that what is left is the rounding of P to e4m3 (about
// 2^-4/√3 relative per probability: a few per cent of a random output) and
// Q's two-part e4m3 form (about 2^-8); and (3) that the kernels' Q is
// that close: over all cases their error is less than half of what Q
// rounded to e4m3 once makes (the FP8 path's largest error before).
func TestPagedAttentionFP8(t *testing.T) {
	p := fp8Pair(t, 21)
	// Against unrounded inputs the error is K's rounding, which the peaky
	// scores of these inputs amplify (head 1's keys are 8 times larger); a
	// wrong layout gives ~1. The portable kernel below sm_89 rounds only Q
	// and P to fp16 (11 bits).
	const tolStored, tolExact, tolF16 = 6e-2, 0.3, 5e-3
	var sumKernel, sumOnce float64 // (3), over the cases
	cases := []struct{ ps, frames, specials, nq, h int }{
		{999, 5, 6, 1005, 2}, {7, 11, 3, 10, 2}, {65, 40, 30, 200, 2}, {64, 9, 64, 129, 3}, {100, 30, 1, 77, 1},
		{130, 7, 100, 200, 2}, {257, 3, 200, 150, 2}, {128, 4, 128, 130, 1}, {15, 6, 6, 400, 2},
	}
	const d = 64
	for _, c := range cases {
		spec := backend.KVSpec{Layers: 2, Pages: c.frames + 4, PageSize: c.ps, Heads: c.h, HeadDim: d}
		gs, err := p.gpu.NewKVStore(spec)
		if err != nil {
			t.Fatal(err)
		}
		exact, err := fx.cpu.NewKVStore(spec)
		if err != nil {
			t.Fatal(err)
		}
		ld := c.h * d
		what := fmt.Sprintf("FP8 PagedAttention %+v", c)
		var table []int32
		written := map[int32]int{} // rows written a page
		write := func(page int32, row int, k, v []float32, n int) {
			ck, gk := p.in(k, n, ld)
			cv, gv := p.in(v, n, ld)
			fx.cpu.WriteKV(exact, 1, int(page), row, ck, cv, 0, n)
			p.gpu.WriteKV(gs, 1, int(page), row, gk, gv, 0, n)
			written[page] = max(written[page], row+n)
		}
		specialPage := int32(c.frames + 2)
		for f := 0; f < c.frames; f++ {
			page := int32((f*3 + 1) % (c.frames + 2))
			// Heads and V of different magnitudes: the scales are per head.
			k, v := p.randn(c.ps*ld, 1.5), p.randn(c.ps*ld, 0.7)
			for i := range k {
				if i%ld >= d {
					k[i] *= 8
				}
			}
			write(page, 0, k, v, c.ps)
			table = append(table, page)
		}
		nan := make([]float32, c.ps*ld)
		for i := range nan {
			nan[i] = float32(math.NaN())
		}
		write(specialPage, 0, nan, nan, c.ps) // stale rows past the specials
		written[specialPage] = 0
		half := c.specials / 2
		write(specialPage, 0, p.randn(half*ld, 1), p.randn(half*ld, 1), half)
		write(specialPage, half, p.randn((c.specials-half)*ld, 1), p.randn((c.specials-half)*ld, 1), c.specials-half)
		table = append(table, specialPage)

		// (1) The stored values.
		per := c.ps * ld
		sk := make([]float32, len(table)*per)
		sv := make([]float32, len(table)*per)
		if err := gs.(backend.KVSnapshotter).ExportKV(1, table, sk, sv); err != nil {
			t.Fatal(err)
		}
		ek := make([]float32, len(table)*per)
		ev := make([]float32, len(table)*per)
		if err := exact.(backend.KVSnapshotter).ExportKV(1, table, ek, ev); err != nil {
			t.Fatal(err)
		}
		// Each head's largest magnitude bounds its scale: at most twice
		// (a power of two) 16/448 of the first write's.
		amax := make([]float64, 2*c.h)
		for i, page := range table {
			for j := 0; j < written[page]*ld; j++ {
				amax[j%ld/d] = max(amax[j%ld/d], math.Abs(float64(ek[i*per+j])))
				amax[c.h+j%ld/d] = max(amax[c.h+j%ld/d], math.Abs(float64(ev[i*per+j])))
			}
		}
		for i, page := range table {
			for j := 0; j < written[page]*ld; j++ {
				for w, a := range [][2]float32{{sk[i*per+j], ek[i*per+j]}, {sv[i*per+j], ev[i*per+j]}} {
					// Half a quantum: 2^-4 of the value, or half the
					// subnormals' quantum, 2^-10 of the scale.
					bound := math.Abs(float64(a[1]))/16 + amax[w*c.h+j%ld/d]*32/448/1024
					if diff := math.Abs(float64(a[0] - a[1])); !(diff <= bound) {
						t.Fatalf("%s: page %d element %d stored as %g, want %g rounded to e4m3 (bound %g)", what, page, j, a[0], a[1], bound)
					}
				}
			}
		}

		// (2) The kernel.
		stored, err := fx.cpu.NewKVStore(spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := stored.(backend.KVSnapshotter).ImportKV(1, table, sk, sv); err != nil {
			t.Fatal(err)
		}
		q := p.randn(c.nq*ld, 1)
		cq, gq := p.in(q, c.nq, c.h, d)
		once := fx.cpu.FromHost(quantizeRows(q, c.h, d), c.nq, c.h, d)
		scale := float32(1 / math.Sqrt(d))
		// The portable kernel (the default below sm_90): fp16 MMAs on the
		// widened values, so only fp16's rounding of Q and of P is left;
		// from sm_89 P·V on e4m3 MMAs, P rounded to e4m3 as the Hopper
		// kernel rounds it. Then the lab's variants (cudadev builds).
		gg := p.gpu.(*gpu)
		gg.pagedVariant = pagedFA2
		tolFA2 := tolF16
		if gg.target.fp8MMA() {
			tolFA2 = tolStored
		}
		p.check(what+" kernel fa2", p.gpu.PagedAttention(gq, gs, 1, table, c.specials, scale), fx.cpu.PagedAttention(cq, stored, 1, table, c.specials, scale), tolFA2)
		for _, variant := range labPagedKernels() {
			if strings.HasPrefix(variant, "poly") && gg.kernels.hopper() {
				gg.pagedVariant = variant
				p.check(what+" kernel "+variant, p.gpu.PagedAttention(gq, gs, 1, table, c.specials, scale), fx.cpu.PagedAttention(cq, stored, 1, table, c.specials, scale), tolStored)
			}
		}
		gg.pagedVariant = pagedFA
		eachAttnVariant(gg, func(a AttnSettings) {
			p.check(fmt.Sprintf("%s attn %v", what, a), p.gpu.PagedAttention(gq, gs, 1, table, c.specials, scale), fx.cpu.PagedAttention(cq, stored, 1, table, c.specials, scale), tolStored)
		})
		got := p.gpu.PagedAttention(gq, gs, 1, table, c.specials, scale)
		want := fx.cpu.PagedAttention(cq, stored, 1, table, c.specials, scale)
		g, w, e := p.gpu.ToHost(got), fx.cpu.ToHost(want), fx.cpu.ToHost(fx.cpu.PagedAttention(cq, exact, 1, table, c.specials, scale))
		o := fx.cpu.ToHost(fx.cpu.PagedAttention(once, stored, 1, table, c.specials, scale))
		if err := p.gpu.Err(); err != nil {
			t.Fatalf("%s: device error: %v", what, err)
		}
		p.gpu.Free(got)
		fx.cpu.Free(want)
		relS, worst := relErr(g, w)
		relE, _ := relErr(g, e)
		relO, _ := relErr(o, w)
		sumKernel += relS
		sumOnce += relO
		t.Logf("%s: relative error %.3g against the stored values, %.3g against unrounded inputs; Q rounded to e4m3 once would make %.3g", what, relS, relE, relO)
		if !(relS <= tolStored) {
			t.Errorf("%s: relative error %.3g > %.3g against the stored values (worst element %d: got %g want %g)", what, relS, tolStored, worst, g[worst], w[worst])
		}
		if !(relE <= tolExact) {
			t.Errorf("%s: relative error %.3g > %.3g against unrounded inputs", what, relE, tolExact)
		}
		p.check(what+" prefix", p.gpu.PagedAttention(gq, gs, 1, table[:2], c.ps, scale), fx.cpu.PagedAttention(cq, stored, 1, table[:2], c.ps, scale), tolStored)

		// Restoring into a fresh store takes scales from the values (within
		// e4m3's rounding); into the same store, bit for bit.
		if err := gs.(backend.KVSnapshotter).ImportKV(1, table, sk, sv); err != nil {
			t.Fatal(err)
		}
		rk := make([]float32, len(sk))
		rv := make([]float32, len(sv))
		if err := gs.(backend.KVSnapshotter).ExportKV(1, table, rk, rv); err != nil {
			t.Fatal(err)
		}
		for i, page := range table {
			for j := 0; j < written[page]*ld; j++ {
				if rk[i*per+j] != sk[i*per+j] || rv[i*per+j] != sv[i*per+j] {
					t.Fatalf("%s: re-imported page %d element %d: K %g V %g, want %g %g", what, page, j, rk[i*per+j], rv[i*per+j], sk[i*per+j], sv[i*per+j])
				}
			}
		}
		fresh, err := p.gpu.NewKVStore(spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := fresh.(backend.KVSnapshotter).ImportKV(1, table, sk, sv); err != nil {
			t.Fatal(err)
		}
		p.check(what+" restored", p.gpu.PagedAttention(gq, fresh, 1, table, c.specials, scale), fx.cpu.PagedAttention(cq, stored, 1, table, c.specials, scale), tolStored)
		for _, s := range []backend.KVStore{gs, fresh} {
			if err := s.(interface{ Close() error }).Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("summed over the cases: kernel %.3g against the stored values; Q rounded to e4m3 once %.3g", sumKernel, sumOnce)
	if !(sumKernel < sumOnce/2) {
		t.Errorf("the FP8 kernel's error, summed over the cases, %.3g is not below half of Q's one e4m3 rounding's %.3g: Q is not kept in two parts", sumKernel, sumOnce)
	}
}

// The FP8 store takes half the bf16 store's memory a page (rows rounded up
// to 16), and refuses head dims its kernel does not take.
func TestKVStoreFP8Size(t *testing.T) {
	p := fp8Pair(t, 22)
	spec := backend.KVSpec{Layers: 2, Pages: 4, PageSize: 999, Heads: 16, HeadDim: 64}
	s, err := p.gpu.NewKVStore(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer s.(interface{ Close() error }).Close()
	st := p.gpu.(*gpu).kv(s)
	if got, want := st.pageBytes(), int64(1008*16*64); got != want {
		t.Errorf("FP8 page of one array: %d bytes, want %d", got, want)
	}
	if _, err := p.gpu.NewKVStore(backend.KVSpec{Layers: 1, Pages: 2, PageSize: 10, Heads: 2, HeadDim: 128}); err == nil || !strings.Contains(err.Error(), "bf16") {
		t.Errorf("head dim 128 in fp8: error %v, want one that suggests bf16", err)
	}
}

// TestFP8Saturation: the FP8 store counts the values its write clips (beyond
// ±448 times their scale, NaN not counted) exactly as the host's e4m3
// rounding would, warns once the count reaches the host (at the next frame's
// first write, without waiting for the device), and starts again after a
// Release with scales set by the next first write.
func TestFP8Saturation(t *testing.T) {
	var logs bytes.Buffer
	cfg := testConfig(FP8)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	be, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	spec := backend.KVSpec{Layers: 2, Pages: 4, PageSize: 100, Heads: 2, HeadDim: 64}
	s, err := be.NewKVStore(spec)
	if err != nil {
		t.Fatal(err)
	}
	st := be.(*gpu).kv(s)
	rng := rand.New(rand.NewPCG(5, 6))
	ld := spec.Heads * spec.HeadDim
	rows := func(scale float64) []float32 {
		x := make([]float32, spec.PageSize*ld)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * scale)
		}
		return x
	}
	write := func(layer, page int, k, v []float32) {
		kt, vt := be.FromHost(k, spec.PageSize, ld), be.FromHost(v, spec.PageSize, ld)
		be.WriteKV(s, layer, page, 0, kt, vt, 0, spec.PageSize)
		be.Free(kt)
		be.Free(vt)
		if err := be.(*gpu).Sync(); err != nil {
			t.Fatal(err)
		}
	}
	count := func() uint64 {
		n, err := st.saturated()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	k0, v0 := rows(1), rows(0.5)
	write(0, 0, k0, v0)
	write(1, 0, rows(1), rows(1))
	if n := count(); n != 0 {
		t.Fatalf("%d values clipped after the calibrating writes", n)
	}
	sc := append(e4m3.Scales(k0, spec.Heads, spec.HeadDim), e4m3.Scales(v0, spec.Heads, spec.HeadDim)...)
	k1, v1 := rows(40), rows(20)
	k1[7] = float32(math.NaN())
	var want uint64
	for j := range k1 {
		h := j % ld / spec.HeadDim
		if math.Abs(float64(k1[j]/sc[h])) > e4m3.Max {
			want++
		}
		if math.Abs(float64(v1[j]/sc[spec.Heads+h])) > e4m3.Max {
			want++
		}
	}
	if want == 0 {
		t.Fatal("the test's large values do not saturate")
	}
	write(0, 1, k1, v1)
	if n := count(); n != want {
		t.Fatalf("%d values counted as clipped, want %d", n, want)
	}
	if strings.Contains(logs.String(), "clipped") {
		t.Fatalf("warned before the count reached the host: %s", logs.String())
	}
	write(0, 2, rows(1), rows(0.5))
	if !strings.Contains(logs.String(), fmt.Sprintf("clipped=%d", want)) {
		t.Fatalf("no warning with clipped=%d after the next frame's first write; log: %q", want, logs.String())
	}
	if err := s.(backend.KVReleaser).Release(); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d values clipped after a release", n)
	}
	write(0, 0, k1, v1) // sets new scales: nothing clipped
	if n := count(); n != 0 {
		t.Fatalf("%d values clipped by the first write after a release", n)
	}
}

// saturated is the number of values clipped since the scales were set
// (synchronous).
func (s *kvStore) saturated() (uint64, error) {
	var n uint64
	err := s.g.own.do(func() error { return cu.MemcpyDtoH(unsafe.Pointer(&n), s.sat, 8) })
	return n, err
}
