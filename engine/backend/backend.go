// Package backend is the contract between the one model definition (engine/model)
// and the machines that run it (engine/cpu, cuda). The model is written only
// against these operations; a backend implements each of them with float32
// semantics (a backend may store weights, activations or the KV cache in lower
// precision where its documentation says so, e.g. bf16 on the GPU).
//
// Conventions:
//   - Tensors are dense and row-major. "Rows" means the product of all dimensions
//     but the last one.
//   - Token tensors are [N, C] or [B, N, C]; attention tensors are [B, N, H, D]
//     (heads inside the token row, exactly what a Linear layer produces).
//   - Images and feature maps are NCHW.
//   - Every operation returns a new tensor and leaves its inputs unchanged.
//     Tensors may be released with Free once they are no longer needed; a backend
//     recycles their memory so that a steady stream allocates nothing new per frame.
package backend

import "fmt"

// Tensor is a handle to backend-owned memory with a shape.
type Tensor interface {
	Shape() []int
}

// Numel is the number of elements of a shape.
func Numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Precision tells a backend how the reference keeps a parameter, so that a
// mixed-precision backend can store it the same way. The CPU backend keeps all
// parameters in float32.
type Precision int

const (
	// Trunk parameters (DINO, aggregator, special tokens) are bf16 in the reference's production path.
	Trunk Precision = iota
	// Head parameters (camera head, DPT heads) stay float32.
	Head
	// HeadConv parameters are head parameters of convolutions (the DPT
	// heads, whose 1×1 projections a model may run as Linear): float32, but
	// the reference's cuDNN multiplies them in TF32, as PyTorch allows for
	// convolutions by default (not for matrix products).
	HeadConv
)

// Activation is an optional epilogue fused into Linear.
type Activation int

const (
	ActNone Activation = iota
	ActGELU            // exact erf GELU
)

// UnaryOp is an elementwise function.
type UnaryOp int

const (
	OpGELU   UnaryOp = iota // exact: x/2·(1+erf(x/√2))
	OpSiLU                  // x·sigmoid(x)
	OpReLU                  // max(x,0)
	OpExp                   // exp(x)
	OpExpP1                 // 1+exp(x)
	OpInvLog                // sign(x)·expm1(|x|)
)

// RoPEPairing says which dimensions of a head rotate together.
//
// With cos/sin tables of shape [N, D/2] (one row per token, shared by all heads),
// pair index m (0 ≤ m < D/2) rotates the two dimensions (i, j) by angle m:
//
//	out_i = x_i·cos − x_j·sin,  out_j = x_j·cos + x_i·sin
type RoPEPairing int

const (
	// RoPEHalves2D: the head is split into two halves of D/2 (rows, then columns);
	// inside half h, pair m = h·D/4 + t (0 ≤ t < D/4) is (h·D/2 + t, h·D/2 + t + D/4)
	// ("rotate half" inside each half). Used by the 2D RoPE of frame blocks.
	RoPEHalves2D RoPEPairing = iota
	// RoPEInterleaved: pair m is (2m, 2m+1). Used by the 3D video RoPE of global blocks.
	RoPEInterleaved
)

// QKVParams says how SplitQKV treats q and k: an optional per-head LayerNorm
// (weights and biases [HeadDim], eps) and then an optional RoPE with tables
// Cos, Sin [N, HeadDim/2] (N = the token dimension of qkv) and a pairing.
// KVUse says what reads k and v afterwards.
type QKVParams struct {
	Heads, HeadDim int
	Norm           bool
	QW, QB, KW, KB Tensor
	Eps            float32
	Cos, Sin       Tensor // nil: no rotation
	Pairing        RoPEPairing
	KVUse          KVUse
}

// KVUse tells SplitQKV which operations will read its k and v, so that a
// backend that keeps activations in several forms (fp32 and the bf16 a GPU
// attention reads) writes only the forms those read. It never changes what
// an operation that the caller announced computes.
type KVUse int

const (
	// KVAny: any operation may read k and v.
	KVAny KVUse = iota
	// KVAttention: only Attention reads k and v. A backend may keep them
	// only at the precision its attention reads them (the CUDA backend's
	// bf16 in BF16 mode); another reader then gets those values.
	KVAttention
	// KVCache: only WriteKV reads k and v.
	KVCache
)

// KVStore is backend-owned storage for the paged KV cache of the global blocks:
// for each of Layers blocks, Pages pages of PageSize token rows, each row holding
// Heads·HeadDim keys and as many values. Which page holds what is decided by
// engine/kvcache; the backend only stores rows and reads page tables.
type KVStore interface {
	Layers() int
	Pages() int
	PageSize() int
}

// KVSpec sizes a KVStore.
type KVSpec struct {
	Layers, Pages, PageSize, Heads, HeadDim int
}

// Bytes is the storage the spec needs at the given bytes per element (K and V).
func (s KVSpec) Bytes(bytesPerElem int) int64 {
	return int64(s.Layers) * int64(s.Pages) * int64(s.PageSize) * 2 * int64(s.Heads*s.HeadDim) * int64(bytesPerElem)
}

func (s KVSpec) String() string {
	return fmt.Sprintf("%d layers × %d pages × %d rows × %d heads × %d", s.Layers, s.Pages, s.PageSize, s.Heads, s.HeadDim)
}

// CheckPages validates the arguments of a KVSnapshotter's ExportKV or
// ImportKV (nk and nv are len(k) and len(v)) and returns the values one page
// holds in K or in V. Backends put their name before its errors.
func (s KVSpec) CheckPages(layer int, pages []int32, nk, nv int) (int, error) {
	per := s.PageSize * s.Heads * s.HeadDim
	if layer < 0 || layer >= s.Layers {
		return 0, fmt.Errorf("KV layer %d of %d", layer, s.Layers)
	}
	if nk != len(pages)*per || nv != nk {
		return 0, fmt.Errorf("KV copy of %d pages needs %d values for K and V, got %d and %d", len(pages), len(pages)*per, nk, nv)
	}
	for _, p := range pages {
		if p < 0 || int(p) >= s.Pages {
			return 0, fmt.Errorf("KV page %d of %d", p, s.Pages)
		}
	}
	return per, nil
}

// BatchDownloader is a Backend that copies several tensors to the host with
// one wait for the device, so that the host's share of the copies overlaps
// the device's last kernels (Download uses it).
type BatchDownloader interface {
	ToHostMany(ts ...Tensor) [][]float32
}

// Download copies ts to the host, in one batch where be is a
// BatchDownloader.
func Download(be Backend, ts ...Tensor) [][]float32 {
	if bd, ok := be.(BatchDownloader); ok {
		return bd.ToHostMany(ts...)
	}
	out := make([][]float32, len(ts))
	for i, t := range ts {
		out[i] = be.ToHost(t)
	}
	return out
}

// Pending is a batch of copies to the host queued by StartDownload: Wait
// waits for them alone and returns the tensors' values in order. It is
// called once, on the goroutine that queued them.
type Pending interface {
	Wait() [][]float32
}

// AsyncDownloader is a Backend that queues a batch of copies to the host
// at the current point of its work without waiting, so that the caller can
// queue more work (the next frame) before it waits for the copies alone.
// The tensors must stay allocated until Wait returns.
type AsyncDownloader interface {
	StartDownload(ts ...Tensor) Pending
}

// StartDownload queues the copies of ts to the host where be is an
// AsyncDownloader; on other backends the copies happen at Wait, through
// Download, which gives the same values: nothing but the caller writes
// into ts before then.
func StartDownload(be Backend, ts ...Tensor) Pending {
	if ad, ok := be.(AsyncDownloader); ok {
		return ad.StartDownload(ts...)
	}
	return lateDownload{be: be, ts: ts}
}

// lateDownload is a Pending that copies at Wait.
type lateDownload struct {
	be Backend
	ts []Tensor
}

func (d lateDownload) Wait() [][]float32 { return Download(d.be, d.ts...) }

// Brancher is a Backend that can run a stretch of operations beside the
// ones queued after it, where the device has room for both (the CUDA
// backend: on a second stream). The model runs the camera head, a chain of
// small latency-bound kernels, beside the dense heads this way.
//
// The caller keeps one rule: no operation queued after Branch returns reads
// a tensor that fn made, until Merge. Frees are safe on either side (the
// backend recycles the memory after Merge), and host reads (ToHost,
// downloads) merge first on their own.
type Brancher interface {
	// Branch runs fn, whose operations may run concurrently with those
	// queued after Branch returns and before Merge.
	Branch(fn func())
	// Merge orders everything queued after it behind the branch's
	// operations; without an open branch it does nothing.
	Merge()
}

// Branch runs fn as a branch where be is a Brancher, else in line.
func Branch(be Backend, fn func()) {
	if b, ok := be.(Brancher); ok {
		b.Branch(fn)
		return
	}
	fn()
}

// Merge ends the branch Branch opened where be is a Brancher.
func Merge(be Backend) {
	if b, ok := be.(Brancher); ok {
		b.Merge()
	}
}

// NormLinearer is a Backend that runs a LayerNorm and the Linear that alone
// reads its output as one operation, so that the normalised values exist
// only in the form the GEMM reads (NormLinear uses it).
type NormLinearer interface {
	// NormLinear is Linear(LayerNorm(x, nw, nb, eps), w, b, act), with the
	// shapes and rules of those two operations.
	NormLinear(x, nw, nb Tensor, eps float32, w, b Tensor, act Activation) Tensor
}

// NormLinear is Linear(LayerNorm(x, nw, nb, eps), w, b, act): one operation
// where be is a NormLinearer, else the two with the normalised tensor freed.
func NormLinear(be Backend, x, nw, nb Tensor, eps float32, w, b Tensor, act Activation) Tensor {
	if nl, ok := be.(NormLinearer); ok {
		return nl.NormLinear(x, nw, nb, eps, w, b, act)
	}
	h := be.LayerNorm(x, nw, nb, eps)
	y := be.Linear(h, w, b, act)
	be.Free(h)
	return y
}

// NormQKVer is a Backend that runs a block's LayerNorm, qkv projection
// and SplitQKV as one operation (NormQKV uses it), so that the projection
// need not exist in every form.
type NormQKVer interface {
	// NormQKV is SplitQKV(NormLinear(x, nw, nb, eps, w, b, ActNone), p).
	NormQKV(x, nw, nb Tensor, eps float32, w, b Tensor, p QKVParams) (q, k, v Tensor)
}

// NormQKV is SplitQKV(NormLinear(x, nw, nb, eps, w, b, ActNone), p): one
// operation where be is a NormQKVer, else those two with the projection
// freed.
func NormQKV(be Backend, x, nw, nb Tensor, eps float32, w, b Tensor, p QKVParams) (q, k, v Tensor) {
	if nq, ok := be.(NormQKVer); ok {
		return nq.NormQKV(x, nw, nb, eps, w, b, p)
	}
	qkv := NormLinear(be, x, nw, nb, eps, w, b, ActNone)
	q, k, v = be.SplitQKV(qkv, p)
	be.Free(qkv)
	return q, k, v
}

// Backend runs the model's operations.
type Backend interface {
	// Name identifies the backend ("cpu", "cuda").
	Name() string

	// --- memory ---

	// FromHost copies host data into a new tensor of the given shape.
	FromHost(data []float32, shape ...int) Tensor
	// Weight stores a parameter; a backend may keep it in the precision the reference uses.
	Weight(name string, data []float32, prec Precision, shape ...int) Tensor
	// ToHost copies a tensor to host memory (waits for pending work).
	ToHost(t Tensor) []float32
	// Zeros is a new zero-filled tensor.
	Zeros(shape ...int) Tensor
	// Reshape is a view of t with another shape of the same element count.
	Reshape(t Tensor, shape ...int) Tensor
	// Free releases t (and no other view of it may be used afterwards). Optional.
	Free(t Tensor)

	// --- dense algebra ---

	// Linear is x·wᵀ + b with an optional fused activation: x [..., K], w [M, K], b [M] or nil → [..., M].
	Linear(x, w, b Tensor, act Activation) Tensor
	// LinearAdd is r + x·wᵀ + b: x [..., K], w [M, K], b [M] or nil, r with the output's shape [..., M].
	LinearAdd(x, w, b, r Tensor) Tensor
	// LayerNorm normalises over the last dimension; w and b may be nil (no affine).
	LayerNorm(x, w, b Tensor, eps float32) Tensor
	// Unary applies an elementwise function.
	Unary(op UnaryOp, x Tensor) Tensor
	// Add is a+b; b's shape must equal a's or be a suffix of it (broadcast over leading dims).
	Add(a, b Tensor) Tensor
	// Mul is a⊙b with the same broadcasting as Add.
	Mul(a, b Tensor) Tensor
	// ScaleShift is x·s + c for scalars s and c.
	ScaleShift(x Tensor, s, c float32) Tensor

	// --- data movement ---

	// SliceRows copies rows [start, start+n) of x viewed as [rows, rest...] along dim 0.
	SliceRows(x Tensor, start, n int) Tensor
	// ConcatRows joins tensors along dim 0 (all other dims equal).
	ConcatRows(xs ...Tensor) Tensor
	// SliceCols copies columns [start, start+n) of the last dimension.
	SliceCols(x Tensor, start, n int) Tensor
	// ConcatCols joins tensors along the last dimension.
	ConcatCols(xs ...Tensor) Tensor
	// Transpose swaps the last two dimensions: [..., A, B] → [..., B, A].
	Transpose(x Tensor) Tensor

	// --- attention ---

	// RoPE rotates q or k of shape [..., N, H, D] with tables cos, sin [N, D/2].
	RoPE(x, cos, sin Tensor, pairing RoPEPairing) Tensor
	// SplitQKV splits qkv [..., N, 3·Heads·HeadDim] into q, k, v [..., N, Heads, HeadDim];
	// q and k are normalised per head (when Norm) and then rotated (when Cos is set).
	// It equals SliceCols, LayerNorm and RoPE in that order.
	SplitQKV(qkv Tensor, p QKVParams) (q, k, v Tensor)
	// Attention is softmax(q·kᵀ·scale)·v per batch and head, no mask:
	// q [B, Nq, H, D], k and v [B, Nk, H, D] → [B, Nq, H, D].
	Attention(q, k, v Tensor, scale float32) Tensor

	// NewKVStore allocates the paged KV storage once, before a stream starts, or
	// returns an error that names the sizes when the device lacks the memory.
	NewKVStore(spec KVSpec) (KVStore, error)
	// WriteKV copies rows [srcRow, srcRow+n) of k and v ([N, H·D] or [N, H, D])
	// into rows [dstRow, dstRow+n) of page `page` of layer `layer`.
	WriteKV(s KVStore, layer, page, dstRow int, k, v Tensor, srcRow, n int)
	// PagedAttention attends q [Nq, H, D] to the keys and values of `pages` of layer
	// `layer` in order; all pages are full except the last, which holds lastPageLen rows.
	PagedAttention(q Tensor, s KVStore, layer int, pages []int32, lastPageLen int, scale float32) Tensor

	// --- convolutions and resampling (NCHW) ---

	// Conv2D: x [N, C, H, W], w [O, C, kh, kw], b [O] or nil, square stride and zero padding.
	Conv2D(x, w, b Tensor, stride, pad int) Tensor
	// ConvTranspose2D: x [N, C, H, W], w [C, O, k, k], b [O] or nil, stride = k, no padding.
	ConvTranspose2D(x, w, b Tensor, stride int) Tensor
	// ResizeBilinear resamples [N, C, H, W] to [N, C, outH, outW] (PyTorch bilinear).
	ResizeBilinear(x Tensor, outH, outW int, alignCorners bool) Tensor
}
