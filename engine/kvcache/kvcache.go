// Package kvcache keeps the page bookkeeping of the paged KV cache of the global
// attention blocks, following the reference's FlashInfer manager
// (reference-model.md §7): a pool of patch pages (one page holds one frame's
// patch tokens) split into scale pages (never evicted), live pages (a FIFO
// sliding window) and free pages, plus an append-only stream of special tokens
// (6 per committed frame) packed contiguously across special pages.
//
// The cache decides which page and row every token goes to and which pages a
// query attends to; the storage itself belongs to a backend. All blocks of the
// model share one page table, so one Cache serves every block.
//
// Every operation is O(1) per frame (Visible is linear in the pages it lists)
// and allocates nothing after New: the deques and free lists are fixed arrays.
package kvcache

import (
	"errors"
	"fmt"
)

const (
	// SpecialPerFrame is the number of special tokens of a frame (camera,
	// 4 registers, scale), the unit the special pool is sized in.
	SpecialPerFrame = 6
	// specialSlack is the reference's extra special pages beyond the formula.
	specialSlack = 16
	// maxPages bounds the bookkeeping arrays (a real cache has about a hundred
	// pages; page ids must fit int32 in any case).
	maxPages = 1 << 24
)

var (
	// ErrPatchPoolFull means no patch page is free: more frames are resident
	// than scale + window + headroom (eviction did not run).
	ErrPatchPoolFull = errors.New("kvcache: no free patch page")
	// ErrSpecialFull means the special-token stream has used every special
	// page: more frames were committed since the last reset than MaxFrames allows.
	ErrSpecialFull = errors.New("kvcache: special-token pages exhausted")
	// ErrNoRollback means there is no append that can still be undone.
	ErrNoRollback = errors.New("kvcache: nothing to roll back")
)

// Config sizes a Cache. It has no defaults of its own: the model passes its
// settings (engine.DefaultConfig holds the defaults).
type Config struct {
	// ScaleFrames is the number of first frames whose pages are never evicted.
	ScaleFrames int
	// SlidingWindow is the number of live (non-scale) frames kept after eviction.
	SlidingWindow int
	// PageSize is the number of patch tokens of one frame (NP): one patch page
	// per frame. Special tokens use pages of the same size.
	PageSize int
	// MaxFrames is the number of committed frames per reset the special pool
	// is sized for. The reference sizes it for max_frame_num + 100 (1124),
	// but its 3D RoPE table stops a stream at max_frame_num committed frames,
	// so the model passes its own limit (1024 by default) and the extra
	// hundred frames' pages are never allocated.
	MaxFrames int
	// Headroom is the number of spare patch pages beyond scale + window
	// (one is needed for a frame attended with eviction deferred; the
	// reference keeps 16).
	Headroom int
}

// Run says: write N special-token rows, starting at row Src of the frame's
// special tokens, into page Page from row Row on.
type Run struct{ Page, Row, N, Src int }

// AppendPlan says where one appended frame goes: all patch tokens into rows
// 0..PageSize−1 of PatchPage, the special tokens as Special (one run, or two
// when they straddle a page boundary).
type AppendPlan struct {
	PatchPage int
	// Special is valid until the next call to Append.
	Special []Run
}

// Stats is the state of the cache, named as in the reference's get_cache_stats
// plus the visible table's size.
type Stats struct {
	FrameCount    int // frames appended since the last reset (and not rolled back)
	ScalePages    int
	LivePages     int
	FreePages     int // free patch pages
	SpecialTokens int
	VisiblePages  int
	LastPageLen   int
	PageSize      int
}

// Cache is the page bookkeeping. It is not safe for concurrent use.
type Cache struct {
	cfg          Config
	patchPages   int
	specialPages int

	scale []int32 // oldest → newest, cap ScaleFrames

	// live is a ring buffer: liveLen pages starting at liveHead, oldest first.
	live     []int32
	liveHead int
	liveLen  int

	freePatch []int32 // stack: pop from the end, recycled pages pushed on the end

	special     []int32 // special pages in use, oldest → newest
	freeSpecial []int32 // stack like freePatch

	specialCount int
	frameCount   int
	deferEvict   bool

	// The last append can be undone until an eviction runs or it is undone.
	canRollback bool
	lastSpecial int

	runs []Run // backing store of AppendPlan.Special
}

// New validates cfg and builds an empty cache.
func New(cfg Config) (*Cache, error) {
	switch {
	case cfg.PageSize < 1:
		return nil, fmt.Errorf("kvcache: page size must be at least 1 token, got %d", cfg.PageSize)
	case cfg.ScaleFrames < 0:
		return nil, fmt.Errorf("kvcache: scale frames must not be negative, got %d", cfg.ScaleFrames)
	case cfg.SlidingWindow < 0:
		return nil, fmt.Errorf("kvcache: sliding window must not be negative, got %d", cfg.SlidingWindow)
	case cfg.MaxFrames < 1:
		return nil, fmt.Errorf("kvcache: max frames must be at least 1, got %d", cfg.MaxFrames)
	case cfg.Headroom < 0:
		return nil, fmt.Errorf("kvcache: headroom must not be negative, got %d", cfg.Headroom)
	}
	patch := int64(cfg.ScaleFrames) + int64(cfg.SlidingWindow) + int64(cfg.Headroom)
	special := (int64(cfg.MaxFrames)*SpecialPerFrame+int64(cfg.PageSize)-1)/int64(cfg.PageSize) + specialSlack
	if patch+special > maxPages {
		return nil, fmt.Errorf("kvcache: %d patch + %d special pages is more than %d; check scale frames, window and max frames", patch, special, maxPages)
	}
	c := &Cache{
		cfg:          cfg,
		patchPages:   int(patch),
		specialPages: int(special),
		scale:        make([]int32, 0, cfg.ScaleFrames),
		live:         make([]int32, patch),
		freePatch:    make([]int32, 0, patch),
		special:      make([]int32, 0, special),
		freeSpecial:  make([]int32, 0, special),
		// A frame's specials straddle at most ceil(n/PageSize)+1 pages.
		runs: make([]Run, 0, SpecialPerFrame/cfg.PageSize+2),
	}
	c.Reset()
	return c, nil
}

// Config returns the configuration the cache was made with.
func (c *Cache) Config() Config { return c.cfg }

// PatchPages is the size of the patch pool (scale + window + headroom).
func (c *Cache) PatchPages() int { return c.patchPages }

// SpecialPages is the size of the special pool, ⌈MaxFrames·6/PageSize⌉ + 16.
func (c *Cache) SpecialPages() int { return c.specialPages }

// NumPages is the number of pages a backend must store: ids 0..NumPages()−1,
// patch pages first, then special pages.
func (c *Cache) NumPages() int { return c.patchPages + c.specialPages }

// Reset empties the cache: every page is free, counters are zero and eviction
// is no longer deferred. The free lists are restored in the reference's order.
func (c *Cache) Reset() {
	c.scale = c.scale[:0]
	c.liveHead, c.liveLen = 0, 0
	c.freePatch = c.freePatch[:0]
	for i := 0; i < c.patchPages; i++ {
		c.freePatch = append(c.freePatch, int32(i))
	}
	c.special = c.special[:0]
	c.freeSpecial = c.freeSpecial[:0]
	for i := c.patchPages; i < c.patchPages+c.specialPages; i++ {
		c.freeSpecial = append(c.freeSpecial, int32(i))
	}
	c.specialCount, c.frameCount = 0, 0
	c.deferEvict = false
	c.canRollback = false
	c.lastSpecial = 0
}

// Append reserves the pages of one more frame with numSpecial special tokens
// and returns where to write them. It fails, changing nothing, when the patch
// pool or the special stream is full.
func (c *Cache) Append(numSpecial int) (AppendPlan, error) {
	if numSpecial < 0 {
		return AppendPlan{}, fmt.Errorf("kvcache: a frame cannot have %d special tokens", numSpecial)
	}
	if len(c.freePatch) == 0 {
		return AppendPlan{}, fmt.Errorf("%w: %d frames resident in a pool of %d pages (scale %d + window %d + headroom %d); evict before appending",
			ErrPatchPoolFull, len(c.scale)+c.liveLen, c.patchPages, c.cfg.ScaleFrames, c.cfg.SlidingWindow, c.cfg.Headroom)
	}
	ps := c.cfg.PageSize
	needPages := (c.specialCount+numSpecial+ps-1)/ps - len(c.special)
	if needPages > len(c.freeSpecial) {
		return AppendPlan{}, fmt.Errorf("%w: %d frames committed since the last reset, the cache holds at most about %d (MaxFrames); reset or start a new window",
			ErrSpecialFull, c.frameCount, c.cfg.MaxFrames)
	}

	page := c.popPatch()
	if len(c.scale) < c.cfg.ScaleFrames {
		c.scale = append(c.scale, page)
	} else {
		c.live[(c.liveHead+c.liveLen)%len(c.live)] = page
		c.liveLen++
	}

	c.runs = c.runs[:0]
	for src := 0; src < numSpecial; {
		row := c.specialCount % ps
		if row == 0 {
			n := len(c.freeSpecial) - 1
			c.special = append(c.special, c.freeSpecial[n])
			c.freeSpecial = c.freeSpecial[:n]
		}
		n := min(numSpecial-src, ps-row)
		c.runs = append(c.runs, Run{Page: int(c.special[len(c.special)-1]), Row: row, N: n, Src: src})
		src += n
		c.specialCount += n
	}
	c.frameCount++
	c.canRollback = true
	c.lastSpecial = numSpecial
	return AppendPlan{PatchPage: int(page), Special: c.runs}, nil
}

func (c *Cache) popPatch() int32 {
	n := len(c.freePatch) - 1
	p := c.freePatch[n]
	c.freePatch = c.freePatch[:n]
	return p
}

// SetDeferEviction turns deferred eviction on or off. While on, Evict does
// nothing, so a frame under test attends to window + 1 live frames.
func (c *Cache) SetDeferEviction(on bool) { c.deferEvict = on }

// DeferEviction reports whether eviction is deferred.
func (c *Cache) DeferEviction() bool { return c.deferEvict }

// Evict frees the oldest live pages until at most SlidingWindow remain,
// unless eviction is deferred. Scale pages and special pages are never evicted.
func (c *Cache) Evict() {
	if c.deferEvict {
		return
	}
	c.evict()
}

// ExecuteDeferredEviction runs the eviction a deferred frame skipped (the
// frame was kept).
func (c *Cache) ExecuteDeferredEviction() { c.evict() }

func (c *Cache) evict() {
	for c.liveLen > c.cfg.SlidingWindow {
		c.freePatch = append(c.freePatch, c.live[c.liveHead])
		c.liveHead = (c.liveHead + 1) % len(c.live)
		c.liveLen--
	}
	c.canRollback = false
}

// Rollback undoes the last Append: its patch page returns to the free list and
// its special tokens are dropped (special pages no longer needed are freed).
// It is valid once per append and only before an eviction has run.
func (c *Cache) Rollback() error {
	if !c.canRollback {
		return fmt.Errorf("%w: no append since the last reset, rollback or eviction", ErrNoRollback)
	}
	var page int32
	if c.frameCount > c.cfg.ScaleFrames {
		last := (c.liveHead + c.liveLen - 1) % len(c.live)
		page = c.live[last]
		c.liveLen--
	} else {
		n := len(c.scale) - 1
		page = c.scale[n]
		c.scale = c.scale[:n]
	}
	c.freePatch = append(c.freePatch, page)

	ps := c.cfg.PageSize
	c.specialCount -= c.lastSpecial
	keep := (c.specialCount + ps - 1) / ps
	for len(c.special) > keep {
		n := len(c.special) - 1
		c.freeSpecial = append(c.freeSpecial, c.special[n])
		c.special = c.special[:n]
	}
	c.frameCount--
	c.canRollback = false
	c.lastSpecial = 0
	return nil
}

// Visible lists the pages a query attends to, scale pages then live pages
// (each oldest first) then special pages, into dst's storage, and the number
// of valid rows of the last page. Only the last page can be partial because
// specials come last. With no special page the last page is a full patch page.
func (c *Cache) Visible(dst []int32) (pages []int32, lastPageLen int) {
	pages = append(dst[:0], c.scale...)
	for i := 0; i < c.liveLen; i++ {
		pages = append(pages, c.live[(c.liveHead+i)%len(c.live)])
	}
	pages = append(pages, c.special...)
	return pages, c.lastPageLen()
}

func (c *Cache) lastPageLen() int {
	ps := c.cfg.PageSize
	if len(c.special) == 0 {
		return ps
	}
	if r := c.specialCount % ps; r != 0 {
		return r
	}
	return ps
}

// Stats describes the cache now.
func (c *Cache) Stats() Stats {
	return Stats{
		FrameCount:    c.frameCount,
		ScalePages:    len(c.scale),
		LivePages:     c.liveLen,
		FreePages:     len(c.freePatch),
		SpecialTokens: c.specialCount,
		VisiblePages:  len(c.scale) + c.liveLen + len(c.special),
		LastPageLen:   c.lastPageLen(),
		PageSize:      c.cfg.PageSize,
	}
}
