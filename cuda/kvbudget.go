package cuda

import (
	"fmt"
	"strings"
)

// Window is the stream's configured window, as the engine's settings give
// it (scale_frames, sliding_window, cache_headroom, max_frames,
// camera_iterations, image_width). With it the backend checks, when the KV
// store is made, that every cache the stream will fill fits in the GPU's
// free memory, and says what fits when it does not. The zero Window checks
// only the store itself.
type Window struct {
	ScaleFrames, SlidingWindow, Headroom int
	// MaxFrames caps the frames committed per reset: the special-token pages
	// and the camera head's cache grow to it.
	MaxFrames int
	// SpecialPerFrame is how many special tokens a frame adds to the cache
	// (kvcache.SpecialPerFrame).
	SpecialPerFrame  int
	CameraIterations int
	// ImageWidth is the model's input width, for saying which width fits.
	ImageWidth int
}

func (w Window) set() bool { return w.MaxFrames > 0 }

const (
	// cameraDepth is the camera head's trunk blocks (the reference's
	// trunk_depth); each iteration and block caches K and V of every
	// committed frame's camera token, 2·E wide, in fp32.
	cameraDepth = 4
	// activationReserve is what the check leaves free beside the caches for
	// a frame's activations and the allocator's cached free buffers (their
	// measured sizes are in cuda/README.md, "Fitting smaller GPUs").
	activationReserve = 1 << 30
	// vmGranule is the granularity the driver maps lazily backed KV pages
	// in (cuMemGetAllocationGranularity on the GPUs measured).
	vmGranule = 2 << 20
)

// kvPlan is what a stream's caches will take on the device.
type kvPlan struct {
	win Window
	// The store: global blocks, heads and head dim, patch tokens a frame
	// (one page), and all its pages (patch, then special; kvcache.NumPages).
	layers, heads, headDim, pageSize, pages int
	elem                                    int64 // bytes a K or V element: 1 in fp8, 2 in bf16, 4 in fp32
	// lazy: pages get memory when first written (virtual memory
	// management), so reserved but unwritten pages cost nothing.
	lazy bool
}

// rows is the rows a page is allocated (kvStore.rows).
func (p kvPlan) rows() int {
	if p.elem == 1 {
		return fp8Rows(p.pageSize)
	}
	return p.pageSize
}

func (p kvPlan) pageBytes() int64 {
	return int64(p.layers) * int64(p.rows()) * 2 * int64(p.heads*p.headDim) * p.elem
}

func (p kvPlan) patchPages() int { return p.win.ScaleFrames + p.win.SlidingWindow + p.win.Headroom }

// specialPages are the special-token pages that the stream writes: its
// MaxFrames frames' tokens packed contiguously. Eager storage holds every
// page of the store.
func (p kvPlan) specialPages() int {
	if !p.lazy {
		return max(p.pages-p.patchPages(), 0)
	}
	return (p.win.MaxFrames*p.win.SpecialPerFrame + p.pageSize - 1) / p.pageSize
}

// kvBytes is the device memory the KV pages take once the stream has
// written all it will.
func (p kvPlan) kvBytes() int64 {
	patch, special := p.patchPages(), p.specialPages()
	// Without a window, or when it does not describe the store (made by
	// other settings), every page counts.
	if !p.win.set() || !p.lazy || patch+special > p.pages {
		return int64(p.pages) * p.pageBytes()
	}
	// Lazily backed pages get memory in whole granules of each layer's K
	// and V arrays (vmSpace): the patch pages are the first of the array,
	// the special pages a run that may start inside a granule.
	region := int64(p.rows()*p.heads*p.headDim) * p.elem // one page of one array
	granules := func(n int) int64 { return (int64(n)*region + vmGranule - 1) / vmGranule }
	mapped := min(granules(patch)+granules(special)+1, granules(p.pages))
	return int64(2*p.layers) * mapped * vmGranule
}

// cameraBytes is the camera head's cache after MaxFrames frames.
func (p kvPlan) cameraBytes() int64 {
	camDim := int64(2 * p.heads * p.headDim)
	return int64(p.win.CameraIterations) * cameraDepth * 2 * int64(p.win.MaxFrames) * camDim * 4
}

// need is the memory the check asks to be free: both caches and the reserve.
func (p kvPlan) need() int64 {
	if !p.win.set() {
		return p.kvBytes()
	}
	return p.kvBytes() + p.cameraBytes() + activationReserve
}

// largestWindow is the largest sliding window, up to the configured one,
// whose plan fits in free bytes; 0 when not even one frame does.
func (p kvPlan) largestWindow(free int64) int {
	for w := p.win.SlidingWindow; w >= 1; w-- {
		q := p
		q.win.SlidingWindow = w
		q.pages = p.pages - p.win.SlidingWindow + w
		if q.need() <= free {
			return w
		}
	}
	return 0
}

// largestWidth is the largest image width below the configured one, at the
// same aspect ratio, whose plan fits in free bytes; 0 when none does or the
// width is unknown. A page is one frame's patch tokens, (W/14)·(H/14).
func (p kvPlan) largestWidth(free int64) int {
	const patch = 14
	cols := p.win.ImageWidth / patch
	if cols == 0 || p.pageSize%cols != 0 {
		return 0
	}
	rows := p.pageSize / cols
	for c := cols - 1; c >= 1; c-- {
		r := max((rows*c*2+cols)/(2*cols), 1) // rows·c/cols, rounded
		q := p
		q.pageSize = c * r
		// The store's special pool grows as pages shrink.
		q.pages = p.patchPages() + (p.win.MaxFrames*p.win.SpecialPerFrame+q.pageSize-1)/q.pageSize + specialSlack(p)
		if q.need() <= free {
			return c * patch
		}
	}
	return 0
}

// specialSlack is the store's special pages beyond those the stream writes
// (the reference's spare pages, kvcache's specialSlack).
func specialSlack(p kvPlan) int {
	written := (p.win.MaxFrames*p.win.SpecialPerFrame + p.pageSize - 1) / p.pageSize
	return max(p.pages-p.patchPages()-written, 0)
}

// check says whether the plan fits in free of total bytes, and if not, what
// does.
func (p kvPlan) check(free, total int64) error {
	need := p.need()
	if need <= free {
		return nil
	}
	if !p.win.set() {
		return fmt.Errorf("the KV cache needs %s (%d layers × %d pages × %d rows × %d heads × %d, %d-byte elements) but the GPU has %s free of %s",
			human(need), p.layers, p.pages, p.pageSize, p.heads, p.headDim, p.elem, human(free), human(total))
	}
	w := p.win
	var b strings.Builder
	fmt.Fprintf(&b, "the caches of this window need %s but the GPU has %s free of %s after the weights: ", human(need), human(free), human(total))
	mapping := "every page of the store allocated now"
	if p.lazy {
		mapping = "mapped in 2 MiB granules as written"
	}
	fmt.Fprintf(&b, "KV %s (%d scale + %d window + %d headroom patch pages and %d special-token pages for max_frames %d; a page is %s: %d layers × %d tokens × K and V × %d × %d-byte elements; %s), ",
		human(p.kvBytes()), w.ScaleFrames, w.SlidingWindow, w.Headroom, p.specialPages(), w.MaxFrames, human(p.pageBytes()), p.layers, p.pageSize, p.heads*p.headDim, p.elem, mapping)
	fmt.Fprintf(&b, "the camera head's cache %s (%d frames), %s kept for activations. ", human(p.cameraBytes()), w.MaxFrames, human(activationReserve))
	var fits []string
	if n := p.largestWindow(free); n > 0 {
		fits = append(fits, fmt.Sprintf("sliding_window %d", n))
	}
	if n := p.largestWidth(free); n > 0 {
		fits = append(fits, fmt.Sprintf("image_width %d with this window", n))
	}
	for _, c := range []struct {
		elem int64
		name string
	}{{2, "precision bf16"}, {1, "precision fp8"}} {
		q := p
		q.elem = c.elem
		if c.elem < p.elem && (c.elem > 1 || p.headDim == 64) && q.need() <= free {
			fits = append(fits, c.name)
			break
		}
	}
	if len(fits) == 0 {
		b.WriteString("Nothing smaller fits either: free device memory first")
	} else {
		b.WriteString("What fits: " + strings.Join(fits, ", or "))
	}
	return fmt.Errorf("%s", b.String())
}

func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%d B", n)
	}
}
