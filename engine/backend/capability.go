package backend

import "io"

// Optional capabilities. A backend (or a KVStore) that has one implements
// the named interface; callers ask with a type assertion on that name, so a
// renamed method breaks the backend's compile-time check instead of silently
// turning the capability off. Each backend declares what it implements:
//
//	var _ backend.Trimmer = (*gpu)(nil)

// ErrorReporter is a backend whose operations cannot return errors (a GPU
// queues work) and which keeps the first device failure instead: callers ask
// after each step and stop rather than use garbage.
type ErrorReporter interface {
	// Err is the first device failure, or nil.
	Err() error
}

// Trimmer is a backend that caches freed buffers for reuse and can give them
// back, once shapes that will not come again are done with.
type Trimmer interface {
	Trim()
}

// RowAppender is a backend that adds rows to a tensor in the tensor's own
// storage where it has room, and otherwise moves it to storage with room to
// grow: a cache that gains a row a call (the camera head's) then copies the
// new rows only, and its storage changes rarely instead of at every call
// (on a GPU each new storage is a device allocation, and each one left
// behind a free).
type RowAppender interface {
	// AppendRows is ConcatRows(x, y), and it takes x: x and its views
	// must not be used or freed afterwards (the result may hold x's
	// storage). y is left as it is.
	AppendRows(x, y Tensor) Tensor
}

// AppendRows is be's AppendRows where be is a RowAppender, else
// ConcatAppend: either way the result replaces x.
func AppendRows(be Backend, x, y Tensor) Tensor {
	if a, ok := be.(RowAppender); ok {
		return a.AppendRows(x, y)
	}
	return ConcatAppend(be, x, y)
}

// ConcatAppend is AppendRows by ConcatRows(x, y) into new storage, with x
// freed.
func ConcatAppend(be Backend, x, y Tensor) Tensor {
	out := be.ConcatRows(x, y)
	be.Free(x)
	return out
}

// MemoryReporter is a backend that tracks the device memory it holds.
type MemoryReporter interface {
	// MemoryUsage is the memory held now and its peak since the last
	// ResetMemoryPeak, in bytes.
	MemoryUsage() (current, peak int64)
	// ResetMemoryPeak starts the peak again from what is held now.
	ResetMemoryPeak()
}

// MemoryPart is one kind of memory a backend holds.
type MemoryPart struct {
	Name  string
	Bytes int64
}

// MemoryParter is a MemoryReporter that also says what the memory held is
// made of, so that a growth can be told apart (KV pages, activations, a
// cache of freed blocks).
type MemoryParter interface {
	MemoryParts() []MemoryPart
}

// HostWork counts, since the backend started, the host's work that can
// leave the device with nothing queued: graphs recorded (the CUDA backend's
// CUDA graphs), device allocations, and frees (a free waits until the device
// is done with the memory).
type HostWork struct {
	GraphsRecorded, DeviceAllocs, DeviceFrees int64
}

// HostWorkReporter is a backend that counts its HostWork; bench charges it
// to the frames it happened in.
type HostWorkReporter interface {
	HostWork() HostWork
}

// Profiler is a backend that keeps a profile of its operations.
type Profiler interface {
	// RestartProfile drops what was measured so far, so that the report
	// covers only what follows.
	RestartProfile()
}

// Unprojector is a backend that makes a frame's map points where its depth
// map is: geom.ConfidentPoints' filter and unprojection run on the device,
// and only the kept points come back.
type Unprojector interface {
	// Unproject returns the points of depth (H·W) that u keeps, in
	// row-major order: 3 coordinates per point in xyz and the pixel index
	// v·W+u of each in pixel.
	Unproject(depth, conf Tensor, u Unprojection) (xyz []float32, pixel []int32, err error)
}

// Unprojection is one frame's filter and camera for Unprojector: a pixel
// (u, v), u and v multiples of Stride, is kept when its depth d =
// depth·DepthScale is finite and positive and its confidence is above
// ConfThreshold (strictly); its point is CamToWorld·((u−cx)/fx·d,
// (v−cy)/fy·d, d), dropped when not finite in float32.
type Unprojection struct {
	Width, Height int
	Intrinsics    [4]float64 // fx, fy, cx, cy
	CamToWorld    [4][4]float64
	// DepthScale multiplies each depth in float32 first (a window's
	// similarity scale), as the host scales a Result's depth.
	DepthScale    float32
	ConfThreshold float64
	Stride        int
}

// AsyncUnprojector is an Unprojector that queues a frame's points behind
// the work queued so far, their copy to the host included, and returns
// without waiting, so that the caller can queue more work (the next frame)
// before it waits for the points alone. depth and conf must stay allocated
// until Wait returns.
type AsyncUnprojector interface {
	Unprojector
	StartUnproject(depth, conf Tensor, u Unprojection) PendingPoints
}

// PendingPoints are one frame's points queued by StartUnproject: Wait
// waits for them and returns what Unproject would have. It is called once,
// on the goroutine that queued them.
type PendingPoints interface {
	Wait() (xyz []float32, pixel []int32, err error)
}

// KVReleaser is a KVStore that can give its memory back while it holds no
// frames; its pages get memory again when they are written.
type KVReleaser interface {
	Release() error
}

// KVSizer is a KVStore that knows its own size in bytes (at its own element
// size, e.g. bf16 on a GPU).
type KVSizer interface {
	Bytes() int64
}

// KVSnapshotter is a KVStore whose pages can be copied out and back in, for
// saving and resuming a session. The host side is always float32; a store
// that keeps bf16 converts exactly both ways (bf16 → float32 → bf16).
type KVSnapshotter interface {
	// ExportKV copies the K and V rows of the given pages of one layer into
	// k and v, each len(pages)·PageSize·Heads·HeadDim values, pages in order.
	ExportKV(layer int, pages []int32, k, v []float32) error
	// ImportKV writes k and v (laid out as ExportKV gives them) into the
	// given pages of one layer.
	ImportKV(layer int, pages []int32, k, v []float32) error
}

// The capability names Capabilities reports, in this order.
const (
	CapErrors  = "errors"
	CapTrim    = "trim"
	CapMemory  = "memory"
	CapProfile = "profile"
	CapClose   = "close"
	CapPoints  = "unproject"
	CapRelease = "kv-release"
	CapKVSize  = "kv-size"
	CapKVClose = "kv-close"
	CapKVSnap  = "kv-snapshot"
)

// Capabilities names the optional interfaces b implements (ErrorReporter,
// Trimmer, MemoryReporter, Profiler, io.Closer, Unprojector); when store is not nil, the
// ones store implements follow (KVReleaser, KVSizer, io.Closer,
// KVSnapshotter).
func Capabilities(b Backend, store KVStore) []string {
	var caps []string
	add := func(ok bool, name string) {
		if ok {
			caps = append(caps, name)
		}
	}
	_, ok := b.(ErrorReporter)
	add(ok, CapErrors)
	_, ok = b.(Trimmer)
	add(ok, CapTrim)
	_, ok = b.(MemoryReporter)
	add(ok, CapMemory)
	_, ok = b.(Profiler)
	add(ok, CapProfile)
	_, ok = b.(io.Closer)
	add(ok, CapClose)
	_, ok = b.(Unprojector)
	add(ok, CapPoints)
	if store != nil {
		_, ok = store.(KVReleaser)
		add(ok, CapRelease)
		_, ok = store.(KVSizer)
		add(ok, CapKVSize)
		_, ok = store.(io.Closer)
		add(ok, CapKVClose)
		_, ok = store.(KVSnapshotter)
		add(ok, CapKVSnap)
	}
	return caps
}
