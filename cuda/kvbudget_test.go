package cuda

import (
	"fmt"
	"strings"
	"testing"
)

// fullPlan is the released model at 518×378 (37×27 = 999 patch tokens a
// frame) with the engine's default window, in bf16 with lazily backed pages.
func fullPlan() kvPlan {
	win := Window{ScaleFrames: 8, SlidingWindow: 64, Headroom: 16, MaxFrames: 1024, SpecialPerFrame: 6, CameraIterations: 4, ImageWidth: 518}
	// kvcache's pool: 88 patch pages, ⌈1024·6/999⌉ + 16 = 23 special pages.
	return kvPlan{win: win, layers: 24, heads: 16, headDim: 64, pageSize: 999, pages: 88 + 23, elem: 2, lazy: true}
}

// TestKVPlanBytes: the sizes of the default full-size stream, by hand.
func TestKVPlanBytes(t *testing.T) {
	p := fullPlan()
	const page = 24 * 999 * 2 * 1024 * 2 // layers × tokens × K and V × H·D × bf16
	if got := p.pageBytes(); got != page {
		t.Errorf("page %d bytes, want %d", got, page)
	}
	// Lazy pages: 8 + 64 + 16 patch pages and the 7 special pages 1024
	// frames write (6144 tokens); the 16 spare special pages stay unbacked.
	// Each of the 48 arrays maps whole 2 MiB granules: 88 pages of
	// 2 045 952 bytes fill 85.9 granules (86), 7 pages 6.8 (7), and the
	// special run may start inside one (+1): 94.
	const lazy = 48 * 94 * 2 << 20
	if got := p.kvBytes(); got != lazy {
		t.Errorf("lazy KV %d bytes, want %d (94 granules of 2 MiB in each of 48 arrays)", got, int64(lazy))
	}
	if lazy < 95*page || lazy > 95*page+48*2*2<<20 {
		t.Errorf("granule rounding: %d bytes is not between the 95 pages written and two granules more an array", int64(lazy))
	}
	const camera = 4 * 4 * 2 * 1024 * 2048 * 4 // iterations × blocks × K and V × frames × 2E × fp32
	if got := p.cameraBytes(); got != camera {
		t.Errorf("camera cache %d bytes, want %d", got, camera)
	}
	if got := p.need(); got != lazy+camera+1<<30 {
		t.Errorf("need %d bytes, want %d", got, int64(lazy+camera+1<<30))
	}
	eager := p
	eager.lazy = false
	if got := eager.kvBytes(); got != 111*page {
		t.Errorf("eager KV %d bytes (%d pages), want every page of the store (111)", got, got/page)
	}
	eager.elem = 4
	if got := eager.kvBytes(); got != 2*111*page {
		t.Errorf("fp32 KV %d bytes, want twice bf16's", got)
	}
	// A store smaller than the window says (made by other settings) counts
	// no more than its pages.
	small := p
	small.pages = 40
	if got := small.kvBytes(); got != 40*page {
		t.Errorf("a 40-page store: KV %d bytes, want %d", got, 40*page)
	}
	// Without a window only the store counts, all of its pages (as before
	// the window was known).
	bare := p
	bare.win = Window{}
	if got := bare.need(); got != 111*page {
		t.Errorf("no window: need %d bytes, want the store's %d", got, 111*page)
	}
}

// TestKVPlanCheck: a plan that fits passes; one that does not names what
// it needs and the largest sliding window and image width that fit, each
// of which does fit while the next larger does not.
func TestKVPlanCheck(t *testing.T) {
	p := fullPlan()
	total := int64(8 << 30)
	if err := p.check(p.need(), total); err != nil {
		t.Fatalf("exactly enough: %v", err)
	}
	free := int64(5_000_000_000) // an 8 GiB card after the context and the weights
	err := p.check(free, total)
	if err == nil {
		t.Fatal("no error with 5 GB free")
	}
	msg := err.Error()
	for _, want := range []string{human(p.need()), human(free), "8 scale + 64 window + 16 headroom", "7 special-token pages", "max_frames 1024", "sliding_window ", "image_width "} {
		if !strings.Contains(msg, want) {
			t.Errorf("message does not say %q:\n%s", want, msg)
		}
	}
	// The window it proposes fits, one more does not.
	var w, width int
	if _, err := fmt.Sscanf(msg[strings.Index(msg, "sliding_window "):], "sliding_window %d", &w); err != nil {
		t.Fatal(err)
	}
	if w != p.largestWindow(free) || w < 1 || w >= 64 {
		t.Fatalf("proposed sliding_window %d, largestWindow %d", w, p.largestWindow(free))
	}
	fits := func(window, pageSize int) bool {
		q := p
		q.win.SlidingWindow, q.pageSize = window, pageSize
		return q.need() <= free
	}
	if !fits(w, 999) || fits(w+1, 999) {
		t.Errorf("sliding_window %d: fits %v, %d fits %v", w, fits(w, 999), w+1, fits(w+1, 999))
	}
	// By hand: 5e9 − 256 MiB camera − 1 GiB reserve leaves 36 granules of
	// 2 MiB for each of the 48 arrays; the 7 special pages take 7 + 1,
	// which leaves 28 for patch pages of 2 045 952 bytes: 28 pages, of
	// which 8 scale + 16 headroom: a window of 4.
	if w != 4 {
		t.Errorf("sliding_window %d, want 4", w)
	}
	if _, err := fmt.Sscanf(msg[strings.Index(msg, "image_width "):], "image_width %d", &width); err != nil {
		t.Fatal(err)
	}
	// At width W the page is (W/14) × round(27·(W/14)/37) tokens.
	page := func(width int) int { c := width / 14; return c * ((27*c*2 + 37) / 74) }
	if width%14 != 0 || width >= 518 || !fits(64, page(width)) || fits(64, page(width+14)) {
		t.Errorf("image_width %d (page %d) fits %v; %d (page %d) fits %v", width, page(width), fits(64, page(width)), width+14, page(width+14), fits(64, page(width+14)))
	}
	// Nothing fits when the reserve and camera cache alone do not.
	if err := p.check(1<<30, total); err == nil || !strings.Contains(err.Error(), "Nothing smaller fits") {
		t.Errorf("1 GiB free: %v", err)
	}
	// fp32 that fits in bf16 says so.
	fp32 := p
	fp32.elem = 4
	if err := fp32.check(p.need(), total); err == nil || !strings.Contains(err.Error(), "precision bf16") {
		t.Errorf("fp32 with bf16's need free: %v", err)
	}
	// bf16 that fits in fp8 says so for heads of 64 (the FP8 kernels'), and
	// not for others; an fp8 page is 1008 rows of one byte.
	fp8 := p
	fp8.elem = 1
	if got, want := fp8.pageBytes(), int64(24*1008*2*1024); got != want {
		t.Errorf("fp8 page: %d bytes, want %d", got, want)
	}
	if err := p.check(fp8.need(), total); err == nil || !strings.Contains(err.Error(), "precision fp8") {
		t.Errorf("bf16 with fp8's need free: %v", err)
	}
	wide := p
	wide.heads, wide.headDim = 8, 128
	wide8 := wide
	wide8.elem = 1
	if err := wide.check(wide8.need(), total); err == nil || strings.Contains(err.Error(), "precision fp8") {
		t.Errorf("bf16 heads of 128 with fp8's need free: %v", err)
	}
	// Without a window the error is the store's alone.
	bare := p
	bare.win = Window{}
	if err := bare.check(free, total); err == nil || !strings.Contains(err.Error(), "the KV cache needs") || strings.Contains(err.Error(), "sliding_window") {
		t.Errorf("no window: %v", err)
	}
}
