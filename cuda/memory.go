//go:build cuda

package cuda

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"sync/atomic"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// memCat says what a buffer holds, for the memory breakdown.
type memCat int

const (
	catOther    memCat = iota // activations and scratch
	catWeight                 // fp32 parameters
	catWeightBF               // bf16 copies of trunk matrices
	catKV                     // KV cache pages and page table
	numCats
)

// buffer is one allocation from the pool; views (Reshape) share it.
type buffer struct {
	ptr  cu.DevicePtr
	size int64 // rounded size class
	cat  memCat
	live bool
	// bfOnly: the values exist only as bf16 in bf (ptr is 0): a trunk matrix
	// whose fp32 copy was dropped, or an activation that only a bf16 GEMM
	// reads (the MLP's hidden layer); see gpu.tensor.
	bfOnly bool
	// trunk marks a parameter the reference keeps in bf16; in BF16 mode its
	// values are rounded to bf16 and GEMMs read the bf16 copy in bf.
	trunk bool
	// conv marks a convolution's parameter (backend.HeadConv): in BF16 mode
	// its GEMMs run in TF32 even when the model calls them Linear.
	conv bool
	// headBF marks a head matrix kept in bf16 only (Config.CameraHeadBF16):
	// Linear and LinearAdd run it through the bf16 GEMV kernels.
	headBF bool
	// taps is a 3×3 convolution weight's tap-major copy ([9][o][c]), made
	// for the Hopper implicit GEMM on first use.
	taps *buffer
	// gen is the pool's generation when the buffer was made, and held says
	// that a free of it waits for a branch's merge (pool.hold).
	gen  int64
	held bool
	// bf is the bf16 copy a bf16 GEMM reads: of a trunk matrix, or of an
	// activation whose producer wrote it beside the fp32 values (LayerNorm
	// in BF16 mode). Tensors are never written after they are made, so the
	// two copies cannot disagree.
	bf *buffer
}

// Tensor is fp32 device memory with a shape. In BF16 mode it may also carry
// a bf16 copy (buffer.bf): trunk weights get one the first time a GEMM reads
// them, and some activations from the op that makes them.
type Tensor struct {
	buf   *buffer
	shape []int
}

// Shape returns the dimensions.
func (t *Tensor) Shape() []int { return t.shape }

func (t *Tensor) String() string { return fmt.Sprintf("cuda.Tensor%v", t.shape) }

func (t *Tensor) numel() int { return backend.Numel(t.shape) }

func (t *Tensor) ptr() cu.DevicePtr { return t.buf.ptr }

// pool is a caching allocator keyed by size class: a stream repeats the same
// shapes every frame, so after the first frame cuMemAlloc is not called at
// all. It is used only on the owner thread.
type pool struct {
	free         map[int64][]cu.DevicePtr
	cached       int64 // bytes held in free lists
	inUse        int64
	inUseBy      [numCats]int64
	peak         int64        // largest inUse seen
	mallocs      atomic.Int64 // cuMemAlloc calls so far (read off the owner thread by HostWork)
	reserved     int64        // bytes obtained from the driver (allocations and mapped KV pages)
	peakReserved int64
	limit        int64 // most bytes kept in free lists; 0: no limit
	released     int64 // cached buffers given back to the driver (limit or sweep)
	// frees counts cuMemFree calls, for readers off the owner thread
	// (bench's host events, after every frame).
	frees atomic.Int64
	// lastGet[size class] is when that class was last asked for (a count
	// of gets): past the limit, the class unused for longest goes first.
	lastGet map[int64]int64
	gets    int64
	// lowFree[size class] is the shortest its free list has been since the
	// last sweep: that many buffers were never needed in the window.
	lowFree map[int64]int
	// beforeFree submits the queued work (batch.flush) before a buffer goes
	// back to the driver: queued kernels may still use it.
	beforeFree func() error
	// While holding (a branch open or not merged, branch.go), put keeps
	// the buffers back in held, except those of generation keep; gen
	// advances at each change.
	gen     int64
	holding bool
	keep    int64
	held    []*buffer
}

// hold starts holding freed buffers: all of them when a branch opens,
// and once it has ended (ended) all but those allocated from then on,
// which only the default stream can have seen.
func (p *pool) hold(ended bool) {
	p.gen++
	p.holding = true
	p.keep = -1
	if ended {
		p.keep = p.gen
	}
}

// reuseHeld hands out a held buffer of size class sz while a branch is
// open (keep is -1): only the branch has run since it opened, so what it
// freed is no longer read by anything but the branch's own earlier
// kernels, which its stream runs first, and the default stream's work
// from before the branch, which the side stream waited for. The lowest
// address goes first, as in the free lists.
func (p *pool) reuseHeld(sz int64, cat memCat) *buffer {
	if !p.holding || p.keep != -1 {
		return nil
	}
	at := -1
	for i, b := range p.held {
		if b.size == sz && (at < 0 || b.ptr < p.held[at].ptr) {
			at = i
		}
	}
	if at < 0 {
		return nil
	}
	b := p.held[at]
	b.live = false // its tensor was freed; the memory is the new buffer's
	p.held = slices.Delete(p.held, at, at+1)
	p.inUseBy[b.cat] -= sz
	p.inUse -= sz
	p.use(sz, cat)
	return &buffer{ptr: b.ptr, size: sz, cat: cat, live: true, gen: p.gen}
}

// unhold ends holding and recycles the held buffers (the branch merged).
func (p *pool) unhold() {
	p.gen++
	p.holding, p.keep = false, -1
	for _, b := range p.held {
		b.held = false
		p.put(b)
	}
	clear(p.held)
	p.held = p.held[:0]
}

// release gives a buffer back to the driver; false when the driver refused.
func (p *pool) release(ptr cu.DevicePtr) bool {
	if p.beforeFree != nil {
		if err := p.beforeFree(); err != nil {
			return false
		}
	}
	p.frees.Add(1)
	return cu.MemFree(ptr) == nil
}

// sweepGets is the window (in allocations) over which the pool watches each
// size class's free list: several frames of the full model. Every window,
// the buffers a class kept free throughout go back to the driver. This
// catches buffers a stream stops needing, chiefly those the camera head's
// caches leave behind: they grow by a row per frame (the reference's design)
// and move to a larger buffer at each doubling (cuda.append_in_place; at each
// size class without it), so their old sizes are either never asked for
// again or asked for less often than they were freed.
const sweepGets = 1 << 15

// sizeClass rounds small sizes to 512 B and large ones to 2 MiB so that
// nearby sizes share buffers. Parameters and the KV cache use it: exact
// sizes matter there, and they are allocated once.
func sizeClass(n int64) int64 {
	const small, large = 512, 2 << 20
	if n <= 0 {
		n = 1
	}
	if n < 4*large {
		return (n + small - 1) / small * small
	}
	return (n + large - 1) / large * large
}

// activationClass rounds an activation or scratch size up to one of eight
// classes per doubling above 64 KiB (at most 12.5 % more): a buffer that grows
// a little each frame then reuses the same class for many frames rather than
// needing a new one every frame.
func activationClass(n int64) int64 {
	const geometricFrom = 64 << 10
	if n <= geometricFrom {
		return sizeClass(n)
	}
	step := int64(1) << (bits.Len64(uint64(n-1)) - 4)
	return (n + step - 1) / step * step
}

func (p *pool) get(bytes int64) (*buffer, error) { return p.getAs(bytes, catOther) }

func (p *pool) getAs(bytes int64, cat memCat) (*buffer, error) {
	sz := sizeClass(bytes)
	if cat == catOther {
		sz = activationClass(bytes)
	}
	if p.lastGet == nil {
		p.lastGet = map[int64]int64{}
	}
	p.gets++
	p.lastGet[sz] = p.gets
	if p.gets%sweepGets == 0 {
		p.sweep()
	}
	if b := p.reuseHeld(sz, cat); b != nil {
		return b, nil
	}
	if l := p.free[sz]; len(l) > 0 {
		ptr := l[len(l)-1]
		p.free[sz] = l[:len(l)-1]
		if low, ok := p.lowFree[sz]; ok && len(l)-1 < low {
			p.lowFree[sz] = len(l) - 1
		}
		p.cached -= sz
		p.use(sz, cat)
		return &buffer{ptr: ptr, size: sz, cat: cat, live: true, gen: p.gen}, nil
	}
	ptr, err := cu.MemAlloc(sz)
	if err != nil && p.cached > 0 {
		// Give the cached buffers back to the driver and try once more.
		p.trim()
		ptr, err = cu.MemAlloc(sz)
	}
	if err != nil {
		return nil, fmt.Errorf("allocating %s on the GPU (%s in use by this backend): %w", human(sz), human(p.inUse), err)
	}
	p.mallocs.Add(1)
	p.reserved += sz
	p.peakReserved = max(p.peakReserved, p.reserved)
	p.use(sz, cat)
	return &buffer{ptr: ptr, size: sz, cat: cat, live: true, gen: p.gen}, nil
}

// external counts memory obtained outside the free lists (KV pages mapped
// through vmSpace); negative bytes when it is given back.
func (p *pool) external(bytes int64, cat memCat) {
	p.reserved += bytes
	p.peakReserved = max(p.peakReserved, p.reserved)
	p.inUseBy[cat] += bytes
	p.inUse += bytes
	p.peak = max(p.peak, p.inUse)
}

// sweep gives back, per size class, the buffers that stayed free through
// the whole window since the last sweep, and starts a new window.
func (p *pool) sweep() {
	if p.lowFree == nil {
		p.lowFree = map[int64]int{}
	}
	for sz, l := range p.free {
		idle, ok := p.lowFree[sz]
		if !ok {
			idle = 0 // freed into the list during this window: watch it first
		}
		idle = min(idle, len(l)) // the cache limit may have taken some
		for _, ptr := range l[len(l)-idle:] {
			if p.release(ptr) {
				p.reserved -= sz
			}
			p.released++
			p.cached -= sz
		}
		l = l[:len(l)-idle]
		if len(l) == 0 {
			delete(p.free, sz)
			delete(p.lowFree, sz)
			continue
		}
		p.free[sz] = l
		p.lowFree[sz] = len(l)
	}
}

func (p *pool) use(sz int64, cat memCat) {
	p.inUse += sz
	p.inUseBy[cat] += sz
	p.peak = max(p.peak, p.inUse)
}

// recategorise moves a live buffer's bytes to another line of the breakdown.
func (p *pool) recategorise(b *buffer, cat memCat) {
	p.inUseBy[b.cat] -= b.size
	p.inUseBy[cat] += b.size
	b.cat = cat
}

func (p *pool) put(b *buffer) {
	if b == nil || !b.live || b.held {
		return
	}
	if p.holding && b.gen != p.keep && b.ptr != 0 {
		b.held = true
		p.held = append(p.held, b)
		return
	}
	b.live = false
	if b.ptr == 0 {
		return // a dropped fp32 copy or a placeholder: nothing to give back
	}
	p.inUseBy[b.cat] -= b.size
	p.inUse -= b.size
	if p.limit > 0 && p.cached+b.size > p.limit {
		// Make room by releasing buffers of the classes asked for least
		// recently (phase 1's, once frames stream); this one, just used, is
		// the likeliest to be asked for again.
		for p.cached+b.size > p.limit && p.evictOldest(b.size) {
		}
		if p.cached+b.size > p.limit && p.release(b.ptr) {
			p.reserved -= b.size
			p.released++
			return
		}
	}
	if p.free == nil {
		p.free = map[int64][]cu.DevicePtr{}
	}
	// Each list is kept in descending address order and gets take its
	// last (lowest) buffer: which buffer an op gets then depends on which
	// ones are free, not on the order the earlier ops freed them in, so a
	// frame's ops get the same buffers as the last frame's and its graph
	// segments repeat (graph.go).
	l := p.free[b.size]
	i, _ := slices.BinarySearchFunc(l, b.ptr, func(e, t cu.DevicePtr) int { return cmp.Compare(t, e) })
	p.free[b.size] = slices.Insert(l, i, b.ptr)
	p.cached += b.size
}

// evictOldest frees one cached buffer of the least recently asked-for size
// class other than keep; false when there is none.
func (p *pool) evictOldest(keep int64) bool {
	best, bestT := int64(-1), int64(0)
	for sz, l := range p.free {
		if sz == keep || len(l) == 0 {
			continue
		}
		if t := p.lastGet[sz]; best < 0 || t < bestT {
			best, bestT = sz, t
		}
	}
	if best < 0 {
		return false
	}
	l := p.free[best]
	ptr := l[len(l)-1]
	p.free[best] = l[:len(l)-1]
	p.cached -= best
	if p.release(ptr) {
		p.reserved -= best
	}
	p.released++
	return true
}

// trim frees every cached buffer.
func (p *pool) trim() {
	for sz, l := range p.free {
		for _, ptr := range l {
			_ = p.release(ptr)
			p.reserved -= sz
		}
	}
	p.free = map[int64][]cu.DevicePtr{}
	p.lowFree = nil
	p.cached = 0
}

// newTensor allocates an uninitialised tensor (owner thread only).
func (g *gpu) newTensor(shape []int, cat memCat) (*Tensor, error) {
	for _, d := range shape {
		if d < 0 {
			return nil, fmt.Errorf("negative dimension in shape %v", shape)
		}
	}
	buf, err := g.pool.getAs(int64(backend.Numel(shape))*4, cat)
	if err != nil {
		return nil, err
	}
	return &Tensor{buf: buf, shape: append([]int(nil), shape...)}, nil
}

// scratch is a temporary buffer released by the caller (owner thread only).
func (g *gpu) scratch(bytes int64) (*buffer, error) { return g.pool.get(bytes) }

func (g *gpu) tensor(t backend.Tensor) *Tensor {
	if t == nil {
		return nil
	}
	c, ok := t.(*Tensor)
	if !ok {
		panic(fmt.Sprintf("cuda: tensor %T is not a CUDA tensor", t))
	}
	if c.buf == nil || !c.buf.live {
		panic(fmt.Sprintf("cuda: tensor %v used after Free", c.shape))
	}
	if c.buf.bfOnly {
		// Read by something other than a bf16 GEMM: bring back the fp32 copy,
		// exactly (the values are bf16 already).
		g.run("restoring fp32 values", func() error { return g.restoreF32(c) })
	}
	return c
}

// gemmTensor is tensor without restoring a dropped fp32 copy (for GEMM
// operands, which may read the bf16 copy).
func (g *gpu) gemmTensor(t backend.Tensor) *Tensor {
	c, ok := t.(*Tensor)
	if !ok || c.buf == nil || !c.buf.live || !c.buf.bfOnly {
		return g.tensor(t)
	}
	return c
}

func (g *gpu) restoreF32(c *Tensor) error {
	if !c.buf.bfOnly {
		return nil
	}
	if err := g.derive(c.buf); err != nil {
		return err
	}
	n := int64(c.numel())
	b, err := g.pool.getAs(n*4, c.buf.cat)
	if err != nil {
		return err
	}
	if err := g.launch1D("elementwise", "bf16_to_f32_k", n, b.ptr, c.buf.bf.ptr, n); err != nil {
		g.pool.put(b)
		return err
	}
	c.buf.ptr, c.buf.size, c.buf.bfOnly = b.ptr, b.size, false
	g.log.Debug("cuda: fp32 copy of bf16-only values restored", "shape", c.shape)
	return nil
}

// attachBF16 gives t an (unwritten) bf16 copy for its producer to fill
// beside the fp32 values; it is released with t, also when the producing
// op fails (outputAs). Owner thread only.
func (g *gpu) attachBF16(t *Tensor) (cu.DevicePtr, error) {
	b, err := g.pool.getAs(int64(t.numel())*2, catOther)
	if err != nil {
		return 0, err
	}
	t.buf.bf = b
	return b.ptr, nil
}

// outputBF16 is output for an activation kept only as bf16: fn fills the
// bf16 buffer. Only a bf16 GEMM reads it as it is; any other op first gets
// its fp32 copy back (gpu.tensor).
func (g *gpu) outputBF16(shape []int, op string, fn func(bf *buffer) error) *Tensor {
	var out *Tensor
	g.run(op, func() error {
		bf, err := g.pool.getAs(int64(backend.Numel(shape))*2, catOther)
		if err != nil {
			return err
		}
		if err := fn(bf); err != nil {
			g.pool.put(bf)
			return err
		}
		out = &Tensor{buf: &buffer{live: true, bfOnly: true, cat: catOther, bf: bf}, shape: append([]int(nil), shape...)}
		return nil
	})
	if out == nil {
		return placeholder(shape)
	}
	return out
}

// placeholder is returned by operations after a device error: it has the
// right shape and no memory, and operations on it are skipped.
func placeholder(shape []int) *Tensor {
	return &Tensor{buf: &buffer{live: true}, shape: append([]int(nil), shape...)}
}

// FromHost copies data into a new tensor.
func (g *gpu) FromHost(data []float32, shape ...int) backend.Tensor {
	if backend.Numel(shape) != len(data) {
		panic(fmt.Sprintf("cuda: FromHost: %d values for shape %v", len(data), shape))
	}
	return g.upload(data, shape, nil)
}

// Weight stores a parameter. In BF16 mode a trunk parameter is rounded to
// bf16 (as the reference stores it); matrices also get a bf16 copy for the
// tensor cores when a GEMM first reads them.
func (g *gpu) Weight(name string, data []float32, prec backend.Precision, shape ...int) backend.Tensor {
	if backend.Numel(shape) != len(data) {
		panic(fmt.Sprintf("cuda: Weight %s: %d values for shape %v", name, len(data), shape))
	}
	trunk := prec == backend.Trunk && g.cfg.Precision.bf16Trunk()
	if trunk && len(shape) == 2 && len(data) > 0 {
		return g.uploadMatrixBF16(data, shape)
	}
	if prec == backend.Head && g.headBF16 && headBF16Matrix(shape) {
		return g.uploadHeadBF16(data, shape)
	}
	return g.upload(data, shape, &buffer{trunk: trunk, conv: prec == backend.HeadConv})
}

// uploadMatrixBF16 stores a trunk matrix in BF16 mode as its bf16 copy only:
// GEMMs read nothing else, and the fp32 copy (twice the bytes) comes back
// only if another op asks for it.
func (g *gpu) uploadMatrixBF16(data []float32, shape []int) backend.Tensor {
	var out *Tensor
	g.run("upload", func() error {
		n := int64(len(data))
		tmp, err := g.pool.get(n * 4)
		if err != nil {
			return err
		}
		defer g.pool.put(tmp)
		if err := g.flush(); err != nil {
			return err
		}
		if err := cu.MemcpyHtoD(tmp.ptr, unsafe.Pointer(&data[0]), n*4); err != nil {
			return err
		}
		bf, err := g.pool.getAs(n*2, catWeightBF)
		if err != nil {
			return err
		}
		if err := g.toBF16(bf.ptr, tmp.ptr, n); err != nil {
			g.pool.put(bf)
			return err
		}
		out = &Tensor{buf: &buffer{live: true, trunk: true, bfOnly: true, cat: catWeight, bf: bf}, shape: append([]int(nil), shape...)}
		return nil
	})
	if out == nil {
		return placeholder(shape)
	}
	return out
}

// upload copies data into a new activation, or into a parameter when param
// is set (its trunk and conv flags are copied onto the new buffer).
func (g *gpu) upload(data []float32, shape []int, param *buffer) backend.Tensor {
	if param == nil {
		return g.output(shape, "upload", func(t *Tensor) error { return g.fill(t, data, false) })
	}
	// Parameters get an exact size class: they live as long as the model.
	return g.outputAs(shape, "upload", catWeight, func(t *Tensor) error {
		t.buf.trunk, t.buf.conv = param.trunk, param.conv
		return g.fill(t, data, param.trunk)
	})
}

// fill copies data into t, rounding it to bf16 for a trunk parameter.
func (g *gpu) fill(t *Tensor, data []float32, trunk bool) error {
	if len(data) == 0 {
		return nil
	}
	if err := g.toDevice(t.ptr(), data); err != nil {
		return err
	}
	if trunk {
		return g.launch1D("elementwise", "round_bf16", int64(len(data)), t.ptr(), int64(len(data)))
	}
	return nil
}

// bf16 returns the bf16 copy of a trunk weight, making it on first use
// (owner thread only).
func (g *gpu) bf16(t *Tensor) (cu.DevicePtr, error) {
	if t.buf.bf != nil {
		return t.buf.bf.ptr, nil
	}
	if err := g.derive(t.buf); err != nil {
		return 0, err
	}
	n := int64(t.numel())
	b, err := g.pool.getAs(n*2, catWeightBF)
	if err != nil {
		return 0, err
	}
	if err := g.toBF16(b.ptr, t.ptr(), n); err != nil {
		g.pool.put(b)
		return 0, err
	}
	t.buf.bf = b
	return b.ptr, nil
}

// ToHost copies a tensor out (waits for pending work).
func (g *gpu) ToHost(t backend.Tensor) []float32 { return g.ToHostMany(t)[0] }

// ToHostMany copies tensors out with one wait for pending work
// (backend.BatchDownloader): the host allocates the results while the
// device finishes.
func (g *gpu) ToHostMany(ts ...backend.Tensor) [][]float32 {
	srcs := make([]cu.DevicePtr, len(ts))
	n := make([]int, len(ts))
	for i, t := range ts {
		c := g.tensor(t)
		srcs[i], n[i] = c.buf.ptr, c.numel()
	}
	var outs [][]float32
	g.run("ToHost", func() error {
		var err error
		outs, err = g.toHostMany(srcs, n)
		return err
	})
	if outs == nil {
		outs = make([][]float32, len(ts))
	}
	for i := range outs {
		if outs[i] == nil {
			outs[i] = make([]float32, n[i])
		}
	}
	return outs
}

// StartDownload queues the copies of ts to the host after the work queued
// so far and returns without waiting (backend.AsyncDownloader): Wait
// submits what was queued since, waits for these copies alone and copies
// them out. The tensors must stay allocated until then.
func (g *gpu) StartDownload(ts ...backend.Tensor) backend.Pending {
	d := &download{g: g, srcs: make([]cu.DevicePtr, len(ts)), n: make([]int, len(ts))}
	for i, t := range ts {
		c := g.tensor(t)
		d.srcs[i], d.n[i] = c.buf.ptr, c.numel()
	}
	g.run("StartDownload", func() error {
		var err error
		d.slot, d.offs, err = g.startDownload(d.srcs, d.n)
		return err
	})
	return d
}

// download is a batch StartDownload queued; without a slot (none free, or
// a failed start) Wait copies through toHostMany.
type download struct {
	g    *gpu
	srcs []cu.DevicePtr
	n    []int
	slot *downSlot
	offs []int64
}

func (d *download) Wait() [][]float32 {
	g := d.g
	var outs [][]float32
	g.run("WaitDownload", func() error {
		var err error
		if d.slot == nil {
			outs, err = g.toHostMany(d.srcs, d.n)
			return err
		}
		outs, err = g.waitDownload(d.slot, d.offs, d.srcs, d.n)
		return err
	})
	if d.slot != nil && outs == nil {
		// the call was refused (a sticky error): the slot's copies are
		// abandoned with the device
		_ = g.own.do(func() error {
			d.slot.inUse = false
			return nil
		})
	}
	if outs == nil {
		outs = make([][]float32, len(d.srcs))
	}
	for i := range outs {
		if outs[i] == nil {
			outs[i] = make([]float32, d.n[i])
		}
	}
	return outs
}

// Zeros is a new zero-filled fp32 tensor.
func (g *gpu) Zeros(shape ...int) backend.Tensor {
	return g.output(shape, "Zeros", func(t *Tensor) error {
		if n := t.numel(); n > 0 {
			return g.batch.zero(t.ptr(), int64(n))
		}
		return nil
	})
}

// Reshape is a view of t with another shape.
func (g *gpu) Reshape(t backend.Tensor, shape ...int) backend.Tensor {
	c := g.gemmTensor(t) // a view of bf16-only values stays so: its readers decide

	if backend.Numel(shape) != c.numel() {
		panic(fmt.Sprintf("cuda: Reshape %v to %v", c.shape, shape))
	}
	return &Tensor{buf: c.buf, shape: append([]int(nil), shape...)}
}

// Free returns t's memory to the pool.
func (g *gpu) Free(t backend.Tensor) {
	if t == nil {
		return
	}
	c, ok := t.(*Tensor)
	if !ok || c.buf == nil || !c.buf.live || (c.buf.ptr == 0 && c.buf.bf == nil) {
		return
	}
	_ = g.own.do(func() error {
		g.pool.put(c.buf.bf)
		g.pool.put(c.buf.taps)
		g.pool.put(c.buf)
		return nil
	})
}

// output allocates an activation tensor and fills it with fn on the owner
// thread; after a device error it returns a placeholder.
func (g *gpu) output(shape []int, op string, fn func(out *Tensor) error) *Tensor {
	return g.outputAs(shape, op, catOther, fn)
}

// outputAs is output for memory of the given kind (size class and breakdown).
func (g *gpu) outputAs(shape []int, op string, cat memCat, fn func(out *Tensor) error) *Tensor {
	var out *Tensor
	g.run(op, func() error {
		t, err := g.newTensor(shape, cat)
		if err != nil {
			return err
		}
		if err := fn(t); err != nil {
			g.pool.put(t.buf.bf)
			g.pool.put(t.buf)
			return err
		}
		out = t
		return nil
	})
	if out == nil {
		return placeholder(shape)
	}
	return out
}

// MemStats describes the allocator.
type MemStats struct {
	Mallocs  int64 // cuMemAlloc calls so far
	Reserved int64 // bytes obtained from the driver: live, cached and KV pages
	// PeakReserved is the largest Reserved so far: the backend's footprint.
	PeakReserved int64
	InUse        int64 // bytes in live tensors and KV stores
	Peak         int64 // largest InUse so far
	Cached       int64 // bytes kept for reuse
	Released     int64 // buffers freed to the driver past Config.CacheLimit
	// InUse by what it holds.
	Weights, WeightsBF16, KV, Activations int64
	// DeviceUsed is the whole device's used memory (cuMemGetInfo): this
	// backend's Reserved plus the CUDA context, kernels, cuBLASLt and any
	// other process on the GPU.
	DeviceUsed int64
}

// MemoryUsage is the device memory this backend holds from the driver:
// live tensors, KV pages and the allocator's cached free buffers (current and
// peak bytes). The CUDA context, kernels and cuBLASLt's own state come on top.
func (g *gpu) MemoryUsage() (current, peak int64) {
	s := g.MemStats()
	return s.Reserved, s.PeakReserved
}

// MemoryParts splits the memory held (MemoryUsage's current) by use.
func (g *gpu) MemoryParts() []backend.MemoryPart {
	s := g.MemStats()
	return []backend.MemoryPart{
		{Name: "weights", Bytes: s.Weights + s.WeightsBF16},
		{Name: "kv", Bytes: s.KV},
		{Name: "activations", Bytes: s.Activations},
		{Name: "cached_free", Bytes: s.Cached},
	}
}

// MemStats reports the allocator's counters.
func (g *gpu) MemStats() MemStats {
	var s MemStats
	_ = g.own.do(func() error {
		p := &g.pool
		s = MemStats{Mallocs: p.mallocs.Load(), Reserved: p.reserved, PeakReserved: p.peakReserved, InUse: p.inUse, Peak: p.peak, Cached: p.cached, Released: p.released,
			Weights: p.inUseBy[catWeight], WeightsBF16: p.inUseBy[catWeightBF], KV: p.inUseBy[catKV], Activations: p.inUseBy[catOther]}
		if free, total, err := memInfo(); err == nil {
			s.DeviceUsed = total - free
		}
		return nil
	})
	return s
}
