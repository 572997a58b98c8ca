//go:build cuda

package cuda

import (
	"math"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// A KV page gets memory when it is first written: a store sized for 64 pages
// of which one is used holds about one page per layer, and attention over
// that page still matches the CPU.
func TestKVPagesBackedOnWrite(t *testing.T) {
	p := pairs(t, 21)[1]
	g := p.gpu.(*gpu)
	spec := backend.KVSpec{Layers: 3, Pages: 64, PageSize: 999, Heads: 16, HeadDim: 64}
	before := g.MemStats()
	s, err := g.NewKVStore(spec)
	if err != nil {
		t.Fatal(err)
	}
	st := s.(*kvStore)
	if st.vm == nil {
		t.Fatal("the H200 supports virtual memory management, yet the store was allocated eagerly")
	}
	if b := st.Bytes(); b != 0 {
		t.Errorf("a new store holds %d bytes of pages, want 0", b)
	}
	cs, err := fx.cpu.NewKVStore(spec)
	if err != nil {
		t.Fatal(err)
	}
	ld := spec.Heads * spec.HeadDim
	ck, gk := p.in(p.randn(spec.PageSize*ld, 1), spec.PageSize, ld)
	cv, gv := p.in(p.randn(spec.PageSize*ld, 1), spec.PageSize, ld)
	const page = 50
	fx.cpu.WriteKV(cs, 2, page, 0, ck, cv, 0, 700)
	g.WriteKV(s, 2, page, 0, gk, gv, 0, 700)
	if err := g.Err(); err != nil {
		t.Fatal(err)
	}
	pb := st.pageBytes()
	regions := int64(2 * spec.Layers)
	// One page of every region, rounded out to whole granules (at most two).
	if b := st.Bytes(); b < regions*pb || b > regions*2*st.vm.gran {
		t.Errorf("after writing one page the store holds %d bytes, want %d…%d", b, regions*pb, regions*2*st.vm.gran)
	}
	if d := g.MemStats().KV - before.KV; d != st.Bytes()+sizeClass(int64(spec.Pages)*4) {
		t.Errorf("the KV line of the breakdown grew by %d, want the pages' %d plus the page table", d, st.Bytes())
	}
	cq, gq := p.in(p.randn(33*ld, 1), 33, spec.Heads, spec.HeadDim)
	scale := float32(1 / math.Sqrt(float64(spec.HeadDim)))
	p.check("PagedAttention on a lazily backed page", g.PagedAttention(gq, s, 2, []int32{page}, 700, scale),
		fx.cpu.PagedAttention(cq, cs, 2, []int32{page}, 700, scale), p.tol)
	// A page in a table that was never written reads zeros, like the
	// reference's zero-initialised cache, rather than faulting.
	p.check("PagedAttention over an unwritten page", g.PagedAttention(gq, s, 2, []int32{page, 3}, 10, scale),
		fx.cpu.PagedAttention(cq, cs, 2, []int32{page, 3}, 10, scale), p.tol)

	// A reset gives every page's memory back; the page is mapped again, zeroed,
	// when next written, and reads what was written then.
	kvBefore, held := g.MemStats().KV, st.Bytes()
	if err := st.Release(); err != nil {
		t.Fatal(err)
	}
	if b := st.Bytes(); b != 0 {
		t.Errorf("after Release the store holds %d bytes, want 0", b)
	}
	if d := kvBefore - g.MemStats().KV; d != held {
		t.Errorf("Release took %d bytes off the KV line, want %d", d, held)
	}
	// The same page table as the last call: it must not be taken as backed.
	p.check("PagedAttention over released pages", g.PagedAttention(gq, s, 2, []int32{page, 3}, 10, scale),
		fx.cpu.PagedAttention(cq, fresh(t, spec), 2, []int32{page, 3}, 10, scale), p.tol)
	g.WriteKV(s, 2, page, 0, gk, gv, 0, 700)
	if b := st.Bytes(); b != held {
		t.Errorf("writing the page again mapped %d bytes, want %d as before", b, held)
	}
	p.check("PagedAttention on a page written after Release", g.PagedAttention(gq, s, 2, []int32{page}, 700, scale),
		fx.cpu.PagedAttention(cq, cs, 2, []int32{page}, 700, scale), p.tol)

	reserved := g.MemStats().Reserved
	held = st.Bytes()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if d := reserved - g.MemStats().Reserved; d != held {
		t.Errorf("closing the store gave back %d bytes, want %d", d, held)
	}
}

// fresh is an empty CPU KV store: what a released GPU store must read like.
func fresh(t *testing.T, spec backend.KVSpec) backend.KVStore {
	t.Helper()
	s, err := fx.cpu.NewKVStore(spec)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Activation classes: never smaller than asked, at most 12.5 % (or 512 B)
// larger, and non-decreasing, so a buffer growing by a row a frame keeps its
// class for many frames.
func TestActivationClass(t *testing.T) {
	prev := int64(0)
	classes := map[int64]bool{}
	for n := int64(1); n < 1<<30; n += 1 + n/97 {
		c := activationClass(n)
		if c < n || float64(c) > float64(n)*1.125+512 || c < prev {
			t.Fatalf("activationClass(%d) = %d (previous class %d)", n, c, prev)
		}
		prev = c
		if n > 1<<20 {
			classes[c] = true
		}
	}
	// Eight classes per doubling from 1 MiB to 1 GiB: 80 in all.
	if len(classes) > 81 {
		t.Errorf("%d classes between 1 MiB and 1 GiB, want at most 81", len(classes))
	}
}

// Buffers that stay free through a whole sweep window go back to the
// driver: all of a class nobody asks for, and the surplus of a class asked
// for less than it was freed (the trail the camera head's growing caches
// leave); the buffer a class still uses stays cached.
func TestIdleBuffersGoBack(t *testing.T) {
	g := fx.fp32.(*gpu)
	const odd, surplus = 3<<20 + 12345, 5<<20 + 777 // sizes nothing else here asks for
	err := g.own.do(func() error {
		g.pool.trim()
		var bufs []*buffer
		for _, n := range []int64{4096, odd, surplus, surplus, surplus} {
			b, err := g.pool.get(n)
			if err != nil {
				return err
			}
			bufs = append(bufs, b)
		}
		for _, b := range bufs {
			g.pool.put(b)
		}
		oddClass, surplusClass := activationClass(odd), activationClass(surplus)
		reserved := g.pool.reserved
		// Three windows: in each, one surplus-sized buffer is used and freed.
		for i := 0; i < 3*sweepGets; i++ {
			n := int64(4096)
			if i%1000 == 0 {
				n = surplus
			}
			b, err := g.pool.get(n)
			if err != nil {
				return err
			}
			g.pool.put(b)
		}
		if l := len(g.pool.free[oddClass]); l != 0 {
			t.Errorf("%d buffers of a class nobody asked for are still cached", l)
		}
		if l := len(g.pool.free[surplusClass]); l != 1 {
			t.Errorf("%d buffers of a class that needs one are cached, want 1", l)
		}
		if len(g.pool.free[activationClass(4096)]) == 0 {
			t.Error("the buffer of the class in constant use was given back")
		}
		if want := reserved - oddClass - 2*surplusClass; g.pool.reserved != want {
			t.Errorf("reserved %d bytes after the sweeps, want %d", g.pool.reserved, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// ResetMemoryPeak makes the peak start again from what is held: a big
// buffer freed and given back before the reset no longer shows in it, one
// made after it does.
func TestResetMemoryPeak(t *testing.T) {
	g := pairs(t, 26)[1].gpu.(*gpu)
	g.Trim()
	big := g.FromHost(make([]float32, 64<<20), 64<<20) // 256 MiB
	g.Free(big)
	g.Trim()
	if _, peak := g.MemoryUsage(); peak < 256<<20 {
		t.Fatalf("peak %d bytes after a 256 MiB buffer", peak)
	}
	g.ResetMemoryPeak()
	cur, peak := g.MemoryUsage()
	if peak != cur {
		t.Fatalf("after ResetMemoryPeak: peak %d, held %d", peak, cur)
	}
	small := g.FromHost(make([]float32, 1<<20), 1<<20) // 4 MiB
	defer g.Free(small)
	if _, p2 := g.MemoryUsage(); p2 < cur+4<<20 || p2 > cur+(8<<20) {
		t.Fatalf("peak %d after a 4 MiB buffer on %d held", p2, cur)
	}
}
