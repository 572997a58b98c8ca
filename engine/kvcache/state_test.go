package kvcache

import (
	"slices"
	"strings"
	"testing"
)

// TestStateRoundTrip: a cache restored from another's State behaves the
// same from then on (same pages, same visible table, same rollback), and
// the literal state after a known history is what the rules say.
func TestStateRoundTrip(t *testing.T) {
	cfg := Config{ScaleFrames: 2, SlidingWindow: 2, PageSize: 4, MaxFrames: 8, Headroom: 1}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// 5 patch pages (0..4), special pages 5.. ; 4 frames, the last deferred
	for i := 0; i < 4; i++ {
		a.SetDeferEviction(i == 3)
		if _, err := a.Append(SpecialPerFrame); err != nil {
			t.Fatal(err)
		}
		a.Evict()
	}
	st := a.State()
	if !slices.Equal(st.Scale, []int32{4, 3}) || !slices.Equal(st.Live, []int32{2, 1}) || !slices.Equal(st.FreePatch, []int32{0}) ||
		st.SpecialCount != 24 || len(st.Special) != 6 || st.FrameCount != 4 || !st.CanRollback || st.LastSpecial != 6 {
		t.Fatalf("state after 4 frames: %+v", st)
	}
	b, _ := New(cfg)
	if err := b.SetState(st); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Cache{a, b} {
		if err := c.Rollback(); err != nil {
			t.Fatal(err)
		}
		c.SetDeferEviction(false)
	}
	for i := 0; i < 3; i++ {
		pa, errA := a.Append(SpecialPerFrame)
		pb, errB := b.Append(SpecialPerFrame)
		if errA != nil || errB != nil || pa.PatchPage != pb.PatchPage || !slices.Equal(pa.Special, pb.Special) {
			t.Fatalf("append %d: %+v %v, restored %+v %v", i, pa, errA, pb, errB)
		}
		a.Evict()
		b.Evict()
		va, la := a.Visible(nil)
		vb, lb := b.Visible(nil)
		if !slices.Equal(va, vb) || la != lb || a.Stats() != b.Stats() {
			t.Fatalf("append %d: visible %v/%d, restored %v/%d", i, va, la, vb, lb)
		}
	}
}

// TestSetStateRefusesInconsistentStates: pages out of range or listed
// twice, pools that do not add up and counters that contradict the pages
// are refused, and the cache keeps its state.
func TestSetStateRefusesInconsistentStates(t *testing.T) {
	cfg := Config{ScaleFrames: 2, SlidingWindow: 2, PageSize: 4, MaxFrames: 8, Headroom: 1}
	c, _ := New(cfg)
	for i := 0; i < 3; i++ {
		if _, err := c.Append(SpecialPerFrame); err != nil {
			t.Fatal(err)
		}
	}
	good := c.State()
	for _, tc := range []struct {
		name string
		edit func(*State)
		want string
	}{
		{"page out of range", func(s *State) { s.Live[0] = 99 }, "outside"},
		{"page twice", func(s *State) { s.FreePatch[0] = s.Scale[0] }, "twice"},
		{"special page in the patch pool", func(s *State) { s.Live[0] = s.Special[0] }, "outside"},
		{"lost page", func(s *State) { s.FreePatch = s.FreePatch[1:] }, "the pool has"},
		{"special count", func(s *State) { s.SpecialCount = 1 }, "special tokens"},
		{"frame count", func(s *State) { s.FrameCount = 1 }, "frame count"},
		{"live before scale", func(s *State) { s.Live = append(s.Live, s.Scale[1]); s.Scale = s.Scale[:1] }, "scale pages are full"},
	} {
		st := c.State()
		tc.edit(&st)
		if err := c.SetState(st); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
		if got := c.State(); !slices.Equal(got.Live, good.Live) || got.FrameCount != good.FrameCount {
			t.Fatalf("%s: the refused state changed the cache", tc.name)
		}
	}
}
