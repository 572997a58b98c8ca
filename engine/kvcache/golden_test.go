package kvcache

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/lingbotmap/lingbotmap/internal/shared"
)

// The manifests of the golden cases log the reference FlashInfer manager's
// statistics around every forward call; replaying the same call sequence on a
// Cache must reproduce them exactly.

type fiStats struct {
	FrameCount    *int `json:"frame_count"`
	ScalePages    int  `json:"scale_pages"`
	LivePages     int  `json:"live_pages"`
	FreePages     *int `json:"free_pages"`
	SpecialTokens int  `json:"special_tokens"`
	VisiblePages  int  `json:"visible_pages"`
	LastPageLen   int  `json:"last_page_len"`
	PageSize      *int `json:"page_size"`
	KVTokens      *int `json:"kv_tokens"`
}

type manifest struct {
	Config struct {
		ScaleFrames   int `json:"scale_frames"`
		SlidingWindow int `json:"sliding_window"`
		MaxFrameNum   int `json:"max_frame_num"`
	} `json:"config"`
	Settings struct {
		ScaleFrames   int `json:"kv_cache_scale_frames"`
		SlidingWindow int `json:"kv_cache_sliding_window"`
	} `json:"settings"`
	PerCall []struct {
		Call        int      `json:"call"`
		FramesIn    int      `json:"frames_in"`
		SkipAppend  bool     `json:"skip_append"`
		FIAfter     fiStats  `json:"fi_after"`
		FIAttended  *fiStats `json:"fi_attended"`
		TFPBefore   int      `json:"tfp_before"`
		TFPAfter    int      `json:"tfp_after"`
		RopeFirst   int      `json:"rope_frame_index_first"`
		CameraCache int      `json:"camera_cache_frames"`
	} `json:"per_call"`
	Events []struct {
		Event      string `json:"event"`
		BeforeCall *int   `json:"before_call"`
		AfterCall  *int   `json:"after_call"`
	} `json:"events"`
}

func loadManifests(t *testing.T) map[string]*manifest {
	t.Helper()
	dir, err := shared.Path("golden")
	if err != nil {
		t.Fatalf("golden data: %v", err)
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*", "manifest.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no golden manifests under %s (err %v)", dir, err)
	}
	out := map[string]*manifest{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		m := &manifest{}
		if err := json.Unmarshal(b, m); err != nil {
			t.Fatalf("%s: %v", p, err)
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

func replay(t *testing.T, m *manifest) {
	if len(m.PerCall) == 0 {
		t.Fatal("manifest has no per_call log")
	}
	const pageSize = 15 // 3×5 patches of the tiny model
	c, err := New(Config{
		ScaleFrames:   m.Settings.ScaleFrames,
		SlidingWindow: m.Settings.SlidingWindow,
		PageSize:      pageSize,
		MaxFrames:     m.Config.MaxFrameNum + 100,
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

func checkAttended(t *testing.T, c *Cache, call int, want *fiStats, table []int32) []int32 {
	t.Helper()
	if want == nil {
		t.Fatalf("call %d: the manifest logs no attention for a streaming frame", call)
	}
	checkStats(t, c, call, "attended", *want, c.cfg.PageSize)
	table, last := c.Visible(table)
	if len(table) != want.VisiblePages || last != want.LastPageLen {
		t.Errorf("call %d: visible table has %d pages, last %d rows; want %d, %d", call, len(table), last, want.VisiblePages, want.LastPageLen)
	}
	if want.KVTokens != nil {
		if got := (len(table)-1)*c.cfg.PageSize + last; got != *want.KVTokens {
			t.Errorf("call %d: %d visible tokens, want %d", call, got, *want.KVTokens)
		}
	}
	checkTable(t, c, table)
	return table
}

func checkStats(t *testing.T, c *Cache, call int, when string, want fiStats, pageSize int) {
	t.Helper()
	s := c.Stats()
	got := fiStats{ScalePages: s.ScalePages, LivePages: s.LivePages, SpecialTokens: s.SpecialTokens,
		VisiblePages: s.VisiblePages, LastPageLen: s.LastPageLen}
	if want.FrameCount != nil && *want.FrameCount != s.FrameCount {
		t.Errorf("call %d %s: frame_count %d, want %d", call, when, s.FrameCount, *want.FrameCount)
	}
	if want.FreePages != nil && *want.FreePages != s.FreePages {
		t.Errorf("call %d %s: free_pages %d, want %d", call, when, s.FreePages, *want.FreePages)
	}
	if want.PageSize != nil && *want.PageSize != pageSize {
		t.Errorf("call %d %s: manifest page size %d, replayed with %d", call, when, *want.PageSize, pageSize)
	}
	w := want
	w.FrameCount, w.FreePages, w.PageSize, w.KVTokens = nil, nil, nil, nil
	if got != w {
		t.Errorf("call %d %s: scale/live/special/visible/last = %d/%d/%d/%d/%d, want %d/%d/%d/%d/%d", call, when,
			got.ScalePages, got.LivePages, got.SpecialTokens, got.VisiblePages, got.LastPageLen,
			w.ScalePages, w.LivePages, w.SpecialTokens, w.VisiblePages, w.LastPageLen)
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
