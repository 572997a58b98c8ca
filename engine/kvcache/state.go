package kvcache

import (
	"fmt"
	"slices"
)

// State is the whole bookkeeping of a Cache, for saving a session: which
// pages hold which frames in which order, the free lists in their order (the
// next append's page depends on it) and the counters. Page ids are the
// cache's own (patch pages first, then special pages).
type State struct {
	Scale        []int32 // scale pages, oldest first
	Live         []int32 // live pages, oldest first
	FreePatch    []int32 // free patch pages, the next one popped last
	Special      []int32 // special pages in use, oldest first
	FreeSpecial  []int32 // free special pages, the next one popped last
	SpecialCount int
	FrameCount   int
	DeferEvict   bool
	CanRollback  bool
	LastSpecial  int
}

// State copies the bookkeeping.
func (c *Cache) State() State {
	live := make([]int32, 0, c.liveLen)
	for i := 0; i < c.liveLen; i++ {
		live = append(live, c.live[(c.liveHead+i)%len(c.live)])
	}
	return State{
		Scale:        slices.Clone(c.scale),
		Live:         live,
		FreePatch:    slices.Clone(c.freePatch),
		Special:      slices.Clone(c.special),
		FreeSpecial:  slices.Clone(c.freeSpecial),
		SpecialCount: c.specialCount,
		FrameCount:   c.frameCount,
		DeferEvict:   c.deferEvict,
		CanRollback:  c.canRollback,
		LastSpecial:  c.lastSpecial,
	}
}

// InUse lists the pages that hold tokens: scale, live, then special pages.
func (s State) InUse() []int32 {
	out := make([]int32, 0, len(s.Scale)+len(s.Live)+len(s.Special))
	out = append(out, s.Scale...)
	out = append(out, s.Live...)
	return append(out, s.Special...)
}

// SetState replaces the bookkeeping with st after checking that it
// describes this cache: every patch page exactly once among scale, live and
// free, every special page exactly once among special and free, and counters
// that agree with the pages. On error the cache is unchanged.
func (c *Cache) SetState(st State) error {
	if err := c.checkState(st); err != nil {
		return err
	}
	c.scale = append(c.scale[:0], st.Scale...)
	c.liveHead, c.liveLen = 0, len(st.Live)
	copy(c.live, st.Live)
	c.freePatch = append(c.freePatch[:0], st.FreePatch...)
	c.special = append(c.special[:0], st.Special...)
	c.freeSpecial = append(c.freeSpecial[:0], st.FreeSpecial...)
	c.specialCount, c.frameCount = st.SpecialCount, st.FrameCount
	c.deferEvict, c.canRollback, c.lastSpecial = st.DeferEvict, st.CanRollback, st.LastSpecial
	return nil
}

func (c *Cache) checkState(st State) error {
	seen := make([]bool, c.NumPages())
	mark := func(what string, pages []int32, lo, hi int) error {
		for _, p := range pages {
			if int(p) < lo || int(p) >= hi {
				return fmt.Errorf("kvcache: state: %s page %d is outside %d..%d", what, p, lo, hi-1)
			}
			if seen[p] {
				return fmt.Errorf("kvcache: state: page %d is listed twice", p)
			}
			seen[p] = true
		}
		return nil
	}
	pp, sp := c.patchPages, c.patchPages+c.specialPages
	for _, l := range []struct {
		what   string
		pages  []int32
		lo, hi int
	}{
		{"scale", st.Scale, 0, pp}, {"live", st.Live, 0, pp}, {"free patch", st.FreePatch, 0, pp},
		{"special", st.Special, pp, sp}, {"free special", st.FreeSpecial, pp, sp},
	} {
		if err := mark(l.what, l.pages, l.lo, l.hi); err != nil {
			return err
		}
	}
	ps := c.cfg.PageSize
	switch {
	case len(st.Scale)+len(st.Live)+len(st.FreePatch) != pp:
		return fmt.Errorf("kvcache: state: %d scale + %d live + %d free pages, the pool has %d", len(st.Scale), len(st.Live), len(st.FreePatch), pp)
	case len(st.Special)+len(st.FreeSpecial) != c.specialPages:
		return fmt.Errorf("kvcache: state: %d special + %d free special pages, the pool has %d", len(st.Special), len(st.FreeSpecial), c.specialPages)
	case len(st.Scale) > c.cfg.ScaleFrames:
		return fmt.Errorf("kvcache: state: %d scale pages, the cache keeps %d", len(st.Scale), c.cfg.ScaleFrames)
	case len(st.Live) > 0 && len(st.Scale) < c.cfg.ScaleFrames:
		return fmt.Errorf("kvcache: state: live pages before the %d scale pages are full", c.cfg.ScaleFrames)
	case st.SpecialCount < 0 || (st.SpecialCount+ps-1)/ps != len(st.Special):
		return fmt.Errorf("kvcache: state: %d special tokens do not fill %d pages of %d", st.SpecialCount, len(st.Special), ps)
	case st.FrameCount < len(st.Scale)+len(st.Live) || st.FrameCount > c.cfg.MaxFrames+specialSlack*ps:
		return fmt.Errorf("kvcache: state: frame count %d with %d resident frames", st.FrameCount, len(st.Scale)+len(st.Live))
	case st.LastSpecial < 0 || st.LastSpecial > st.SpecialCount:
		return fmt.Errorf("kvcache: state: last append of %d special tokens out of %d", st.LastSpecial, st.SpecialCount)
	}
	return nil
}
