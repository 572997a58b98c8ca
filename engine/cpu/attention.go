package cpu

import (
	"fmt"
	"math"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/backend/e4m3"
)

// kvChunk is a run of key/value rows: row i of head h starts at k[i*ld + h*D].
type kvChunk struct {
	k, v []float32
	n    int
	ld   int
}

const (
	queryBlock = 64   // queries per task
	keyChunk   = 1024 // keys per chunk in dense attention
)

// attend computes one head's softmax attention for a block of queries over a
// list of key chunks with an online softmax, so that memory stays at one
// query block × one chunk whatever the number of keys (72 000 in the full model).
//
// q rows start at q[i*ldq]; out rows at out[i*ldq] (same layout); d = head dim.
func attend(q []float32, nq, ldq, hoff, d int, chunks []kvChunk, scale float32, out []float32, scores, tmp []float32, acc []float64, mx, sum []float64) {
	for i := 0; i < nq; i++ {
		mx[i] = math.Inf(-1)
		sum[i] = 0
	}
	clear(acc[:nq*d])
	for _, c := range chunks {
		if c.n == 0 {
			continue
		}
		// scores[nq, c.n] = q_h · k_hᵀ
		sgemm(false, true, nq, c.n, d, scale, q[hoff:], ldq, c.k[hoff:], c.ld, 0, scores, c.n)
		for i := 0; i < nq; i++ {
			row := scores[i*c.n : (i+1)*c.n]
			m := max(float64(rowMax(row)), mx[i])
			corr := math.Exp(mx[i] - m)
			if math.IsInf(mx[i], -1) {
				corr = 0
			}
			mx[i] = m
			a := acc[i*d : (i+1)*d]
			for j := range a {
				a[j] *= corr
			}
			// row becomes exp(score − m), vectorised (softmax.go)
			sum[i] = sum[i]*corr + expSubSum(row, float32(m))
		}
		// tmp[nq, d] = P · v_h, then acc += tmp (acc was rescaled above).
		sgemm(false, false, nq, d, c.n, 1, scores, c.n, c.v[hoff:], c.ld, 0, tmp, d)
		for i, t := range tmp[:nq*d] {
			acc[i] += float64(t)
		}
	}
	for i := 0; i < nq; i++ {
		o := out[i*ldq+hoff : i*ldq+hoff+d]
		a := acc[i*d : (i+1)*d]
		inv := 1 / sum[i]
		for t := range o {
			o[t] = float32(a[t] * inv)
		}
	}
}

// runAttention splits (batch, head, query block) tasks over the cores.
func (b *Backend) runAttention(q []float32, batch, nq, h, d int, chunksFor func(bi int) []kvChunk, scale float32, out []float32) {
	qb := (nq + queryBlock - 1) / queryBlock
	tasks := batch * h * qb
	ld := h * d
	b.parallelFor(tasks, func(lo, hi int) {
		maxChunk := 0
		for bi := 0; bi < batch; bi++ {
			for _, c := range chunksFor(bi) {
				maxChunk = max(maxChunk, c.n)
			}
		}
		scores := make([]float32, queryBlock*maxChunk)
		acc := make([]float64, queryBlock*d)
		tmp := make([]float32, queryBlock*d)
		mx := make([]float64, queryBlock)
		sum := make([]float64, queryBlock)
		for task := lo; task < hi; task++ {
			bi := task / (h * qb)
			hd := (task / qb) % h
			blk := task % qb
			q0 := blk * queryBlock
			n := min(queryBlock, nq-q0)
			base := (bi*nq + q0) * ld
			attend(q[base:], n, ld, hd*d, d, chunksFor(bi), scale, out[base:], scores, tmp, acc, mx, sum)
		}
	})
}

// Attention is dense softmax attention per batch and head.
func (b *Backend) Attention(q, k, v backend.Tensor, scale float32) backend.Tensor {
	qt, kt, vt := ct(q), ct(k), ct(v)
	if len(qt.shape) != 4 || len(kt.shape) != 4 || len(vt.shape) != 4 {
		panic(fmt.Sprintf("cpu: Attention wants [B,N,H,D]: q %v k %v v %v", qt.shape, kt.shape, vt.shape))
	}
	batch, nq, h, d := qt.shape[0], qt.shape[1], qt.shape[2], qt.shape[3]
	nk := kt.shape[1]
	if kt.shape[0] != batch || kt.shape[2] != h || kt.shape[3] != d || len(vt.data) != len(kt.data) {
		panic(fmt.Sprintf("cpu: Attention q %v k %v v %v", qt.shape, kt.shape, vt.shape))
	}
	ld := h * d
	chunks := make([][]kvChunk, batch)
	for bi := 0; bi < batch; bi++ {
		for s := 0; s < nk; s += keyChunk {
			n := min(keyChunk, nk-s)
			off := (bi*nk + s) * ld
			chunks[bi] = append(chunks[bi], kvChunk{k: kt.data[off:], v: vt.data[off:], n: n, ld: ld})
		}
	}
	out := b.alloc(qt.shape...)
	b.runAttention(qt.data, batch, nq, h, d, func(bi int) []kvChunk { return chunks[bi] }, scale, out.data)
	return out
}

// kvStore keeps K and V of every layer's pages in float32. With fp8 the
// values are rounded to e4m3 at their layer's scales when written.
type kvStore struct {
	spec backend.KVSpec
	// k[l] and v[l] hold layer l's Pages·PageSize·Heads·HeadDim values;
	// nil after Release until the layer is used again (arrays).
	k, v [][]float32
	fp8  bool
	// scales[l] are layer l's K scales per head, then its V scales, set by
	// its first write (nil before).
	scales [][]float32
}

func (s *kvStore) Layers() int   { return s.spec.Layers }
func (s *kvStore) Pages() int    { return s.spec.Pages }
func (s *kvStore) PageSize() int { return s.spec.PageSize }

// NewKVStore allocates the paged storage.
func (b *Backend) NewKVStore(spec backend.KVSpec) (backend.KVStore, error) {
	if spec.Layers <= 0 || spec.Pages <= 0 || spec.PageSize <= 0 || spec.Heads <= 0 || spec.HeadDim <= 0 {
		return nil, fmt.Errorf("cpu: invalid KV store size %v", spec)
	}
	per := spec.Pages * spec.PageSize * spec.Heads * spec.HeadDim
	s := &kvStore{spec: spec, k: make([][]float32, spec.Layers), v: make([][]float32, spec.Layers), fp8: b.fp8KV}
	if s.fp8 {
		s.scales = make([][]float32, spec.Layers)
	}
	for l := range s.k {
		s.k[l] = make([]float32, per)
		s.v[l] = make([]float32, per)
	}
	return s, nil
}

var _ backend.KVReleaser = (*kvStore)(nil)

// Release drops every layer's arrays while the cache holds no frames (a
// reset): they come back zeroed when the layer is next used. The FP8 scales
// go too, so that the next stream's first writes set them, as on the GPU.
func (s *kvStore) Release() error {
	clear(s.k)
	clear(s.v)
	clear(s.scales)
	return nil
}

// arrays returns a layer's K and V, remade zeroed after a Release.
func (s *kvStore) arrays(layer int) ([]float32, []float32) {
	if s.k[layer] == nil {
		per := s.spec.Pages * s.spec.PageSize * s.spec.Heads * s.spec.HeadDim
		s.k[layer], s.v[layer] = make([]float32, per), make([]float32, per)
	}
	return s.k[layer], s.v[layer]
}

func kvs(s backend.KVStore) *kvStore {
	c, ok := s.(*kvStore)
	if !ok {
		panic(fmt.Sprintf("cpu: KV store %T is not a CPU store", s))
	}
	return c
}

// WriteKV copies n rows of k and v into a page.
func (b *Backend) WriteKV(s backend.KVStore, layer, page, dstRow int, k, v backend.Tensor, srcRow, n int) {
	st := kvs(s)
	kt, vt := ct(k), ct(v)
	ld := st.spec.Heads * st.spec.HeadDim
	if layer < 0 || layer >= st.spec.Layers || page < 0 || page >= st.spec.Pages || dstRow < 0 || dstRow+n > st.spec.PageSize ||
		srcRow < 0 || (srcRow+n)*ld > len(kt.data) || len(kt.data) != len(vt.data) {
		panic(fmt.Sprintf("cpu: WriteKV layer %d page %d rows [%d,+%d) from [%d,+%d) of %v (store %v)", layer, page, dstRow, n, srcRow, n, kt.shape, st.spec))
	}
	dst := (page*st.spec.PageSize + dstRow) * ld
	ks, vs := kt.data[srcRow*ld:(srcRow+n)*ld], vt.data[srcRow*ld:(srcRow+n)*ld]
	if st.fp8 {
		st.writeFP8(layer, dst, ks, vs)
		return
	}
	kd, vd := st.arrays(layer)
	copy(kd[dst:dst+n*ld], ks)
	copy(vd[dst:dst+n*ld], vs)
}

// writeFP8 stores rows of K and V at element dst of a layer, rounded to
// e4m3 at the layer's scales, which its first write sets.
func (s *kvStore) writeFP8(layer, dst int, k, v []float32) {
	h, d := s.spec.Heads, s.spec.HeadDim
	if s.scales[layer] == nil {
		s.scales[layer] = append(e4m3.Scales(k, h, d), e4m3.Scales(v, h, d)...)
	}
	sc := s.scales[layer]
	kd, vd := s.arrays(layer)
	for j := range k {
		hd := j % (h * d) / d
		kd[dst+j] = e4m3.Round(k[j], sc[hd])
		vd[dst+j] = e4m3.Round(v[j], sc[h+hd])
	}
}

// PagedAttention attends q [Nq, H, D] to the listed pages of one layer.
func (b *Backend) PagedAttention(q backend.Tensor, s backend.KVStore, layer int, pages []int32, lastPageLen int, scale float32) backend.Tensor {
	st := kvs(s)
	qt := ct(q)
	rows, _ := rowsCols(qt.shape)
	h, d := st.spec.Heads, st.spec.HeadDim
	nq := len(qt.data) / (h * d)
	_ = rows
	ld := h * d
	ps := st.spec.PageSize
	kd, vd := st.arrays(layer)
	chunks := make([]kvChunk, len(pages))
	for i, p := range pages {
		if int(p) < 0 || int(p) >= st.spec.Pages {
			panic(fmt.Sprintf("cpu: PagedAttention page %d out of %d", p, st.spec.Pages))
		}
		n := ps
		if i == len(pages)-1 {
			n = lastPageLen
		}
		off := int(p) * ps * ld
		chunks[i] = kvChunk{k: kd[off:], v: vd[off:], n: n, ld: ld}
	}
	out := b.alloc(qt.shape...)
	b.runAttention(qt.data, 1, nq, h, d, func(int) []kvChunk { return chunks }, scale, out.data)
	return out
}
