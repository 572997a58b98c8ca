//go:build cuda

package cuda

import (
	"fmt"
	"slices"

	"gorgonia.org/cu"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// SplitQKV splits qkv [..., N, 3·H·D] into q, k, v [..., N, H, D] with the
// optional qk-norm and RoPE in one launch (kernels/qkv.cu), instead of three
// SliceCols, two LayerNorms and two RoPEs.
func (g *gpu) SplitQKV(qkv backend.Tensor, p backend.QKVParams) (q, k, v backend.Tensor) {
	// A projection kept in bf16 only (QKV with cuda.qkv_bf16) is read as
	// it is by the head-size-64 kernel; the others get its fp32 values.
	xt := g.gemmTensor(qkv)
	r := len(xt.shape)
	h, d := p.Heads, p.HeadDim
	if r < 2 || h <= 0 || d <= 0 || xt.shape[r-1] != 3*h*d {
		panic(fmt.Sprintf("cuda: SplitQKV of %v into %d heads of %d", xt.shape, h, d))
	}
	bfIn := xt.buf.bfOnly && d == 64 && aligned(4, xt.buf.bf.ptr)
	if xt.buf.bfOnly && !bfIn {
		xt = g.tensor(qkv)
	}
	n := xt.shape[r-2]
	var qw, qb, kw, kb *Tensor
	if p.Norm {
		qw, qb, kw, kb = g.tensor(p.QW), g.tensor(p.QB), g.tensor(p.KW), g.tensor(p.KB)
		for _, t := range []*Tensor{qw, qb, kw, kb} {
			if t != nil && t.numel() != d {
				panic(fmt.Sprintf("cuda: SplitQKV norm parameter %v for heads of %d", t.shape, d))
			}
		}
	}
	if (p.Cos == nil) != (p.Sin == nil) {
		panic("cuda: SplitQKV needs both RoPE tables or neither")
	}
	ct, st := g.tensor(p.Cos), g.tensor(p.Sin)
	if ct != nil {
		if d%2 != 0 || ct.numel() != n*d/2 || st.numel() != n*d/2 {
			panic(fmt.Sprintf("cuda: SplitQKV of %v (head %d) with RoPE tables %v, %v", xt.shape, d, ct.shape, st.shape))
		}
		switch {
		case p.Pairing == backend.RoPEHalves2D && d%4 != 0:
			panic(fmt.Sprintf("cuda: SplitQKV halves-2D RoPE needs a head size divisible by 4, not %d", d))
		case p.Pairing != backend.RoPEHalves2D && p.Pairing != backend.RoPEInterleaved:
			panic(fmt.Sprintf("cuda: unknown RoPE pairing %d", p.Pairing))
		}
	}
	shape := append(append([]int(nil), xt.shape[:r-1]...), h, d)
	rows := int64(xt.numel() / (3 * h * d))
	norm := 0
	if p.Norm {
		norm = 1
	}

	// In BF16 mode k and v of head size 64 also come out in bf16 for the
	// attention that reads them (see Attention), sparing it two casts. With
	// cuda.lean_qkv the caller's KVUse drops what nobody reads: the bf16
	// forms before the KV cache's writes (which read fp32), the fp32 forms
	// before the attention (k and v are then bf16 only, as the hidden layer
	// of Linear can be).
	bfKV := d == 64 && g.cfg.Precision.bf16Trunk() && !g.cfg.ExactAttention
	bfOnlyKV := bfKV && g.cfg.LeanQKV && p.KVUse == backend.KVAttention
	if g.cfg.LeanQKV && p.KVUse == backend.KVCache {
		bfKV = false
	}

	var outs [3]*Tensor
	g.run("SplitQKV", func() error {
		var ts [3]*Tensor
		release := func() {
			for _, t := range ts {
				if t != nil {
					g.pool.put(t.buf.bf)
					g.pool.put(t.buf)
				}
			}
		}
		for i := range ts {
			if i > 0 && bfOnlyKV && aligned(8, xt.ptr()) {
				ts[i] = &Tensor{buf: &buffer{live: true, bfOnly: true, cat: catOther}, shape: slices.Clone(shape)}
				continue
			}
			t, err := g.newTensor(shape, catOther)
			if err != nil {
				release()
				return err
			}
			ts[i] = t
		}
		var err error
		fast := d == 64 && aligned(8, ts[0].ptr(), ts[1].ptr(), ts[2].ptr(), xt.ptr())
		if !fast && bfIn {
			if err := g.restoreF32(xt); err != nil {
				release()
				return err
			}
		}
		kernel, in := "qkv_split_d64", xt.ptr()
		if fast && bfIn {
			kernel, in = "qkv_split_d64_bf", xt.buf.bf.ptr
		}
		args := []any{ts[0].ptr(), ts[1].ptr(), ts[2].ptr(), in, ptrOf(qw), ptrOf(qb), ptrOf(kw), ptrOf(kb),
			norm, p.Eps, ptrOf(ct), ptrOf(st), int(p.Pairing), rows, n, h}
		if fast {
			var kbf, vbf cu.DevicePtr
			if bfKV {
				var err error
				if kbf, err = g.attachBF16(ts[1]); err == nil {
					vbf, err = g.attachBF16(ts[2])
				}
				if err != nil {
					release()
					return err
				}
			}
			err = g.launch1D("qkv", kernel, rows*int64(h)*32, append(args, kbf, vbf)...)
		} else {
			err = g.launch1D("qkv", "qkv_split_f32", rows*int64(h)*32, append(args, d)...)
		}
		if err != nil {
			release()
			return err
		}
		outs = ts
		return nil
	})
	if outs[0] == nil {
		return placeholder(shape), placeholder(shape), placeholder(shape)
	}
	return outs[0], outs[1], outs[2]
}
