package kvcache

import (
	"path/filepath"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/golden"
	"github.com/lingbotmap/lingbotmap/internal/shared"
)

// The manifests of the golden cases log the reference FlashInfer manager's
// statistics around every forward call; replaying the same call sequence on a
// Cache must reproduce them exactly.

func loadManifests(t *testing.T) map[string]*golden.Manifest {
	t.Helper()
	dir, err := shared.Path("golden")
	if err != nil {
		t.Fatalf("golden data: %v", err)
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*", "manifest.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no golden manifests under %s (err %v)", dir, err)
	}
	out := map[string]*golden.Manifest{}
	for _, p := range paths {
		m, err := golden.Load(filepath.Dir(p))
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(filepath.Dir(p))] = m
	}
	return out
}

func TestGoldenReplay(t *testing.T) {
	ms := loadManifests(t)
	// Every case with a cache log must be replayed; guard against a silently
	// empty directory or a renamed case.
	for _, want := range []string{"stream_kf1", "stream_kf2", "stream_flow", "windowed_kf2", "images_kf1"} {
		if ms[want] == nil {
			t.Fatalf("golden case %s is missing", want)
		}
	}
	for name, m := range ms {
		t.Run(name, func(t *testing.T) { replay(t, m) })
	}
}

func replay(t *testing.T, m *golden.Manifest) {
	if len(m.PerCall) == 0 {
		t.Fatal("manifest has no per_call log")
	}
	const pageSize = 15 // 3×5 patches of the tiny model
	c, err := New(Config{
		ScaleFrames:   m.Settings.KVScaleFrames,
		SlidingWindow: m.Settings.KVSlidingWindow,
		PageSize:      pageSize,
		MaxFrames:     m.Config.MaxFrameNum + 100, // the reference's special pool
		Headroom:      16,                         // the reference's spare patch pages
	})
	if err != nil {
		t.Fatal(err)
	}
	resetBefore := map[int]bool{}
	flowAfter := map[int]string{} // call → "commit" | "rollback"
	for _, e := range m.Events {
		switch e.Event {
		case "clean_kv_cache":
			resetBefore[*e.BeforeCall] = true
		case "commit", "rollback":
			flowAfter[*e.AfterCall] = e.Event
		}
	}
	if !resetBefore[0] {
		t.Fatal("manifest does not clean the cache before the first call")
	}

	var table []int32
	var attended, rolledBack, committed int
	for _, pc := range m.PerCall {
		if resetBefore[pc.Call] {
			c.Reset()
		}
		flow, isFlow := flowAfter[pc.Call]
		switch {
		case pc.FramesIn > 1: // phase 1: the scale frames together, append + evict each
			for range pc.FramesIn {
				mustAppend(t, c)
				c.Evict()
			}
			if pc.FIAttended != nil {
				t.Fatalf("call %d: phase 1 logged a paged attention", pc.Call)
			}
		case pc.SkipAppend: // interval non-keyframe: attend with eviction deferred, then undo
			old := c.DeferEviction()
			c.SetDeferEviction(true)
			mustAppend(t, c)
			table = checkAttended(t, c, pc.Call, pc.FIAttended, table)
			if err := c.Rollback(); err != nil {
				t.Fatalf("call %d: %v", pc.Call, err)
			}
			c.SetDeferEviction(old)
			rolledBack++
		case isFlow: // flow frame: attend with eviction deferred; decided after the call
			c.SetDeferEviction(true)
			mustAppend(t, c)
			table = checkAttended(t, c, pc.Call, pc.FIAttended, table)
			c.SetDeferEviction(false)
		default: // keyframe (or a single scale frame): append → evict → attend
			mustAppend(t, c)
			c.Evict()
			table = checkAttended(t, c, pc.Call, pc.FIAttended, table)
		}
		if pc.FIAttended != nil {
			attended++
		}
		checkStats(t, c, pc.Call, "after", pc.FIAfter, pageSize)
		switch flow {
		case "commit":
			c.ExecuteDeferredEviction()
			committed++
		case "rollback":
			if err := c.Rollback(); err != nil {
				t.Fatalf("call %d: flow rollback: %v", pc.Call, err)
			}
			rolledBack++
		}
	}
	t.Logf("%d calls replayed, %d attended, %d committed flow frames, %d rollbacks", len(m.PerCall), attended, committed, rolledBack)
}

func mustAppend(t *testing.T, c *Cache) {
	t.Helper()
	if _, err := c.Append(SpecialPerFrame); err != nil {
		t.Fatal(err)
	}
}

func checkAttended(t *testing.T, c *Cache, call int, want *golden.CacheStats, table []int32) []int32 {
	t.Helper()
	if want == nil {
		t.Fatalf("call %d: the manifest logs no attention for a streaming frame", call)
	}
	checkStats(t, c, call, "attended", *want, c.cfg.PageSize)
	table, last := c.Visible(table)
	if len(table) != want.VisiblePages || last != want.LastPageLen {
		t.Errorf("call %d: visible table has %d pages, last %d rows; want %d, %d", call, len(table), last, want.VisiblePages, want.LastPageLen)
	}
	if want.Logged("kv_tokens") {
		if got := (len(table)-1)*c.cfg.PageSize + last; got != want.KVTokens {
			t.Errorf("call %d: %d visible tokens, want %d", call, got, want.KVTokens)
		}
	}
	checkTable(t, c, table)
	return table
}

// checkStats compares the cache with a logged state; frame_count, free_pages
// and page_size only where the manifest logged them (fi_after, not fi_attended).
func checkStats(t *testing.T, c *Cache, call int, when string, want golden.CacheStats, pageSize int) {
	t.Helper()
	s := c.Stats()
	if want.Logged("frame_count") && want.FrameCount != s.FrameCount {
		t.Errorf("call %d %s: frame_count %d, want %d", call, when, s.FrameCount, want.FrameCount)
	}
	if want.Logged("free_pages") && want.FreePages != s.FreePages {
		t.Errorf("call %d %s: free_pages %d, want %d", call, when, s.FreePages, want.FreePages)
	}
	if want.Logged("page_size") && want.PageSize != pageSize {
		t.Errorf("call %d %s: manifest page size %d, replayed with %d", call, when, want.PageSize, pageSize)
	}
	if s.ScalePages != want.ScalePages || s.LivePages != want.LivePages || s.SpecialTokens != want.SpecialTokens ||
		s.VisiblePages != want.VisiblePages || s.LastPageLen != want.LastPageLen {
		t.Errorf("call %d %s: scale/live/special/visible/last = %d/%d/%d/%d/%d, want %d/%d/%d/%d/%d", call, when,
			s.ScalePages, s.LivePages, s.SpecialTokens, s.VisiblePages, s.LastPageLen,
			want.ScalePages, want.LivePages, want.SpecialTokens, want.VisiblePages, want.LastPageLen)
	}
}

// checkTable requires every visible page id to be unique, in its pool's range,
// and ordered scale, live (patch pool), then special (special pool).
func checkTable(t *testing.T, c *Cache, table []int32) {
	t.Helper()
	s := c.Stats()
	seen := make(map[int32]bool, len(table))
	for i, p := range table {
		if seen[p] {
			t.Fatalf("page %d appears twice in the visible table %v", p, table)
		}
		seen[p] = true
		patch := i < s.ScalePages+s.LivePages
		if patch && (p < 0 || int(p) >= c.PatchPages()) {
			t.Fatalf("visible patch page %d outside the patch pool [0,%d)", p, c.PatchPages())
		}
		if !patch && (int(p) < c.PatchPages() || int(p) >= c.NumPages()) {
			t.Fatalf("visible special page %d outside the special pool [%d,%d)", p, c.PatchPages(), c.NumPages())
		}
	}
}
