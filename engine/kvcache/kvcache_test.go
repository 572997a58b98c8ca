package kvcache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// model is the cache's rules written the simplest way, with growing slices as
// the reference's Python deques and lists, to check Cache against.
type model struct {
	scaleFrames, window, pageSize int
	scale, live, freePatch        []int32
	special, freeSpecial          []int32
	specialCount, frameCount      int
	deferred, canRollback         bool
	lastSpecial                   int
	patchPages, specialPages      int
}

func newModel(cfg Config, patchPages, specialPages int) *model {
	m := &model{scaleFrames: cfg.ScaleFrames, window: cfg.SlidingWindow, pageSize: cfg.PageSize,
		patchPages: patchPages, specialPages: specialPages}
	m.reset()
	return m
}

func (m *model) reset() {
	*m = model{scaleFrames: m.scaleFrames, window: m.window, pageSize: m.pageSize,
		patchPages: m.patchPages, specialPages: m.specialPages}
	for i := range m.patchPages {
		m.freePatch = append(m.freePatch, int32(i))
	}
	for i := range m.specialPages {
		m.freeSpecial = append(m.freeSpecial, int32(m.patchPages+i))
	}
}

// append returns the page of the patches and, per special token, its page and
// row, or ok=false when a pool is exhausted.
func (m *model) append(n int) (patch int32, rows [][2]int, ok bool) {
	if len(m.freePatch) == 0 {
		return 0, nil, false
	}
	// Specials one token at a time, as the reference's description reads.
	need := 0
	for i := range n {
		if (m.specialCount+i)%m.pageSize == 0 {
			need++
		}
	}
	if need > len(m.freeSpecial) {
		return 0, nil, false
	}
	patch = m.freePatch[len(m.freePatch)-1]
	m.freePatch = m.freePatch[:len(m.freePatch)-1]
	if len(m.scale) < m.scaleFrames {
		m.scale = append(m.scale, patch)
	} else {
		m.live = append(m.live, patch)
	}
	for range n {
		if m.specialCount%m.pageSize == 0 {
			m.special = append(m.special, m.freeSpecial[len(m.freeSpecial)-1])
			m.freeSpecial = m.freeSpecial[:len(m.freeSpecial)-1]
		}
		rows = append(rows, [2]int{int(m.special[len(m.special)-1]), m.specialCount % m.pageSize})
		m.specialCount++
	}
	m.frameCount++
	m.canRollback, m.lastSpecial = true, n
	return patch, rows, true
}

func (m *model) evict(force bool) {
	if m.deferred && !force {
		return
	}
	for len(m.live) > m.window {
		m.freePatch = append(m.freePatch, m.live[0])
		m.live = m.live[1:]
	}
	m.canRollback = false
}

func (m *model) rollback() bool {
	if !m.canRollback {
		return false
	}
	var p int32
	if m.frameCount > m.scaleFrames {
		p, m.live = m.live[len(m.live)-1], m.live[:len(m.live)-1]
	} else {
		p, m.scale = m.scale[len(m.scale)-1], m.scale[:len(m.scale)-1]
	}
	m.freePatch = append(m.freePatch, p)
	m.specialCount -= m.lastSpecial
	for len(m.special) > (m.specialCount+m.pageSize-1)/m.pageSize {
		m.freeSpecial = append(m.freeSpecial, m.special[len(m.special)-1])
		m.special = m.special[:len(m.special)-1]
	}
	m.frameCount--
	m.canRollback = false
	return true
}

func (m *model) visible() ([]int32, int) {
	v := slices.Concat(m.scale, m.live, m.special)
	last := m.pageSize
	if len(m.special) > 0 && m.specialCount%m.pageSize != 0 {
		last = m.specialCount % m.pageSize
	}
	return v, last
}

func (m *model) stats() Stats {
	v, last := m.visible()
	return Stats{FrameCount: m.frameCount, ScalePages: len(m.scale), LivePages: len(m.live),
		FreePages: len(m.freePatch), SpecialTokens: m.specialCount, VisiblePages: len(v),
		LastPageLen: last, PageSize: m.pageSize}
}

func TestAgainstModel(t *testing.T) {
	cfgs := []Config{
		{ScaleFrames: 8, SlidingWindow: 6, PageSize: 999, MaxFrames: 10, Headroom: 1},
		{ScaleFrames: 3, SlidingWindow: 4, PageSize: 15, MaxFrames: 40, Headroom: 2},
		{ScaleFrames: 2, SlidingWindow: 3, PageSize: 7, MaxFrames: 30, Headroom: 1},
		{ScaleFrames: 1, SlidingWindow: 2, PageSize: 4, MaxFrames: 12, Headroom: 1}, // 6 specials over 2–3 pages
		{ScaleFrames: 0, SlidingWindow: 1, PageSize: 1, MaxFrames: 5, Headroom: 1},  // 6 pages per frame
		{ScaleFrames: 4, SlidingWindow: 0, PageSize: 6, MaxFrames: 10, Headroom: 3},
	}
	for i, cfg := range cfgs {
		t.Run(fmt.Sprintf("ps%d_scale%d_win%d", cfg.PageSize, cfg.ScaleFrames, cfg.SlidingWindow), func(t *testing.T) {
			runAgainstModel(t, cfg, uint64(i), 5000)
		})
	}
}

func runAgainstModel(t *testing.T, cfg Config, seed uint64, steps int) {
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := newModel(cfg, c.PatchPages(), c.SpecialPages())
	rng := rand.New(rand.NewPCG(seed, 99))
	var table []int32
	counts := map[string]int{}
	for step := range steps {
		op := rng.IntN(100)
		var name string
		switch {
		case op < 40:
			name = "append"
			n := SpecialPerFrame
			if rng.IntN(10) == 0 {
				n = rng.IntN(2 * SpecialPerFrame) // odd counts exercise other straddles
			}
			plan, err := c.Append(n)
			patch, rows, ok := m.append(n)
			if ok != (err == nil) {
				t.Fatalf("step %d: append(%d): cache error %v, model ok=%v", step, n, err, ok)
			}
			if !ok {
				name = "append-full"
				if !errors.Is(err, ErrPatchPoolFull) && !errors.Is(err, ErrSpecialFull) {
					t.Fatalf("step %d: append error %v is neither pool-full error", step, err)
				}
				break
			}
			if plan.PatchPage != int(patch) {
				t.Fatalf("step %d: patch page %d, model %d", step, plan.PatchPage, patch)
			}
			var got [][2]int
			src := 0
			for _, r := range plan.Special {
				if r.Src != src || r.N < 1 || r.Row+r.N > cfg.PageSize {
					t.Fatalf("step %d: bad run %+v in %+v", step, r, plan.Special)
				}
				for k := range r.N {
					got = append(got, [2]int{r.Page, r.Row + k})
				}
				src += r.N
			}
			if !slices.Equal(got, rows) {
				t.Fatalf("step %d: special rows %v, model %v", step, got, rows)
			}
		case op < 60:
			name = "evict"
			c.Evict()
			m.evict(false)
		case op < 68:
			name = "defer"
			on := rng.IntN(2) == 0
			c.SetDeferEviction(on)
			m.deferred = on
		case op < 75:
			name = "execute"
			c.ExecuteDeferredEviction()
			m.evict(true)
		case op < 92:
			name = "rollback"
			err := c.Rollback()
			ok := m.rollback()
			if ok != (err == nil) {
				t.Fatalf("step %d: rollback: cache error %v, model ok=%v", step, err, ok)
			}
			if !ok {
				name = "rollback-refused"
				if !errors.Is(err, ErrNoRollback) {
					t.Fatalf("step %d: rollback error %v", step, err)
				}
			}
		default:
			if rng.IntN(4) == 0 {
				name = "reset"
				c.Reset()
				m.reset()
			} else {
				name = "visible"
			}
		}
		counts[name]++
		if got, want := c.Stats(), m.stats(); got != want {
			t.Fatalf("step %d after %s: stats %+v, model %+v", step, name, got, want)
		}
		var last int
		table, last = c.Visible(table)
		wantTable, wantLast := m.visible()
		if !slices.Equal(table, wantTable) || last != wantLast {
			t.Fatalf("step %d after %s: visible %v (last %d), model %v (last %d)", step, name, table, last, wantTable, wantLast)
		}
		checkTable(t, c, table)
	}
	// The random walk must have reached the interesting states.
	for _, k := range []string{"append", "append-full", "evict", "rollback", "rollback-refused", "reset", "execute"} {
		if counts[k] == 0 {
			t.Errorf("the random sequence never exercised %q (counts %v)", k, counts)
		}
	}
	t.Logf("%v", counts)
}

func TestLiteralPageIDs(t *testing.T) {
	// Tiny golden sizes: 3 + 4 + 16 = 23 patch pages, ⌈356·6/15⌉ + 16 = 159 special pages.
	c, err := New(Config{ScaleFrames: 3, SlidingWindow: 4, PageSize: 15, MaxFrames: 356, Headroom: 16})
	if err != nil {
		t.Fatal(err)
	}
	if c.PatchPages() != 23 || c.SpecialPages() != 159 || c.NumPages() != 182 {
		t.Fatalf("pools %d + %d = %d, want 23 + 159 = 182", c.PatchPages(), c.SpecialPages(), c.NumPages())
	}
	// Stacks pop from the end: the highest ids go first.
	p, err := c.Append(6)
	if err != nil {
		t.Fatal(err)
	}
	if p.PatchPage != 22 || !slices.Equal(p.Special, []Run{{Page: 181, Row: 0, N: 6, Src: 0}}) {
		t.Fatalf("first plan %+v", p)
	}
	mustAppend(t, c)
	p, _ = c.Append(6) // specials 12..17 straddle pages 181 and 180
	if p.PatchPage != 20 || !slices.Equal(p.Special, []Run{{181, 12, 3, 0}, {180, 0, 3, 3}}) {
		t.Fatalf("third plan %+v", p)
	}
	for range 5 {
		mustAppend(t, c)
		c.Evict()
	}
	// 8 frames: scale 22,21,20; live 19..15 → evicts 19, which goes back on the free stack.
	table, last := c.Visible(nil)
	want := []int32{22, 21, 20, 18, 17, 16, 15, 181, 180, 179, 178}
	if !slices.Equal(table, want) || last != 3 {
		t.Fatalf("visible %v last %d, want %v last 3", table, last, want)
	}
	p, _ = c.Append(6)
	if p.PatchPage != 19 {
		t.Fatalf("recycled page %d, want 19", p.PatchPage)
	}
	// Phase 1 with one frame: rollback takes the page from the scale deque.
	c.Reset()
	mustAppend(t, c)
	if err := c.Rollback(); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s != (Stats{FreePages: 23, LastPageLen: 15, PageSize: 15}) {
		t.Fatalf("after rollback of the only frame: %+v", s)
	}
	table, last = c.Visible(table)
	if len(table) != 0 || last != 15 {
		t.Fatalf("empty cache visible %v last %d", table, last)
	}
}

func TestCapacityErrors(t *testing.T) {
	// Patch pool: 1 + 1 + 1 pages; without eviction the fourth frame has no page.
	c, err := New(Config{ScaleFrames: 1, SlidingWindow: 1, PageSize: 10, MaxFrames: 100, Headroom: 1})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		mustAppend(t, c)
	}
	before := c.Stats()
	if _, err := c.Append(6); !errors.Is(err, ErrPatchPoolFull) {
		t.Fatalf("fourth append without eviction: %v, want ErrPatchPoolFull", err)
	}
	if c.Stats() != before {
		t.Fatalf("a refused append changed the cache: %+v → %+v", before, c.Stats())
	}
	c.Evict()
	mustAppend(t, c)

	// Special pool: ⌈2·6/10⌉ + 16 = 18 pages of 10 = 180 tokens = 30 frames.
	c, err = New(Config{ScaleFrames: 1, SlidingWindow: 1, PageSize: 10, MaxFrames: 2, Headroom: 16})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if _, err := c.Append(6); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		c.Evict()
	}
	before = c.Stats()
	if _, err := c.Append(6); !errors.Is(err, ErrSpecialFull) {
		t.Fatalf("31st frame: %v, want ErrSpecialFull", err)
	}
	if c.Stats() != before {
		t.Fatalf("a refused append changed the cache: %+v → %+v", before, c.Stats())
	}
	if _, err := c.Append(-1); err == nil {
		t.Fatal("negative special count accepted")
	}
	if err := c.Rollback(); !errors.Is(err, ErrNoRollback) {
		t.Fatalf("rollback after eviction: %v, want ErrNoRollback", err)
	}
	c.Reset()
	if err := c.Rollback(); !errors.Is(err, ErrNoRollback) {
		t.Fatalf("rollback of an empty cache: %v", err)
	}

	for _, bad := range []Config{
		{ScaleFrames: 1, SlidingWindow: 1, PageSize: 0},
		{ScaleFrames: -1, SlidingWindow: 1, PageSize: 5},
		{ScaleFrames: 1, SlidingWindow: -2, PageSize: 5},
		{ScaleFrames: 1, SlidingWindow: 1, PageSize: 5, MaxFrames: -1},
		{ScaleFrames: 1, SlidingWindow: 1, PageSize: 5, MaxFrames: 0, Headroom: 1}, // no default of its own
		{ScaleFrames: 1, SlidingWindow: 1, PageSize: 5, MaxFrames: 10, Headroom: -1},
		{ScaleFrames: 1 << 30, SlidingWindow: 1 << 30, PageSize: 5, MaxFrames: 10},
	} {
		if _, err := New(bad); err == nil {
			t.Errorf("New(%+v) accepted", bad)
		}
	}
	d, err := New(Config{ScaleFrames: 8, SlidingWindow: 64, PageSize: 999, MaxFrames: 1024 + 100, Headroom: 16})
	if err != nil {
		t.Fatal(err)
	}
	// The reference's pools for the full model at 518×378: 88 patch pages and 23 special pages (§7).
	if d.PatchPages() != 88 || d.SpecialPages() != 23 {
		t.Fatalf("reference pools %d + %d, want 88 + 23", d.PatchPages(), d.SpecialPages())
	}
}

func TestNoAllocations(t *testing.T) {
	c, err := New(Config{ScaleFrames: 8, SlidingWindow: 64, PageSize: 999, MaxFrames: 1024, Headroom: 16})
	if err != nil {
		t.Fatal(err)
	}
	table := make([]int32, 0, c.NumPages())
	var fail error
	allocs := testing.AllocsPerRun(2000, func() {
		if c.Stats().FrameCount >= 1000 {
			c.Reset()
		}
		// A rejected non-keyframe, then a keyframe.
		c.SetDeferEviction(true)
		if _, err := c.Append(SpecialPerFrame); err != nil {
			fail = err
		}
		table, _ = c.Visible(table)
		if err := c.Rollback(); err != nil {
			fail = err
		}
		c.SetDeferEviction(false)
		if _, err := c.Append(SpecialPerFrame); err != nil {
			fail = err
		}
		c.Evict()
		table, _ = c.Visible(table)
	})
	if fail != nil {
		t.Fatal(fail)
	}
	if allocs != 0 {
		t.Fatalf("%v allocations per frame, want 0", allocs)
	}
}

func BenchmarkKeyframe(b *testing.B) {
	c, err := New(Config{ScaleFrames: 8, SlidingWindow: 64, PageSize: 999, MaxFrames: 1024, Headroom: 16})
	if err != nil {
		b.Fatal(err)
	}
	table := make([]int32, 0, c.NumPages())
	for b.Loop() {
		if c.Stats().FrameCount >= 1000 {
			c.Reset()
		}
		if _, err := c.Append(SpecialPerFrame); err != nil {
			b.Fatal(err)
		}
		c.Evict()
		table, _ = c.Visible(table)
	}
}
