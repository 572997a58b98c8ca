//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/backend/e4m3"
)

// The GPU store can be saved and restored with a session: pages are copied
// to the host and back, bf16 pages widened to float32 on the way out and
// rounded back on the way in, which restores them bit for bit. FP8 pages
// go out dequantized (exactly: the scales are powers of two); a layer
// restored into a store that has no scales for it yet gets them from the
// restored values by the rule of its first write, so its values come back
// within e4m3's rounding, and bit for bit when that gives the same scales.
var _ backend.KVSnapshotter = (*kvStore)(nil)

// ExportKV copies the listed pages of one layer to the host.
func (s *kvStore) ExportKV(layer int, pages []int32, k, v []float32) error {
	if s.fp8 {
		return s.exportFP8(layer, pages, k, v)
	}
	return s.copyPages(layer, pages, k, v, func(p int32, dev cu.DevicePtr, dst []float32, raw []uint16) error {
		if !s.backed[p] {
			clear(dst) // a page without memory reads as zeros when it gets some
			return nil
		}
		if !s.bf {
			return s.g.toHost(dst, dev)
		}
		if err := cu.MemcpyDtoH(unsafe.Pointer(&raw[0]), dev, int64(len(raw))*2); err != nil {
			return err
		}
		for j, b := range raw {
			dst[j] = math.Float32frombits(uint32(b) << 16)
		}
		return nil
	})
}

// ImportKV writes host K and V into the listed pages of one layer.
func (s *kvStore) ImportKV(layer int, pages []int32, k, v []float32) error {
	if s.fp8 {
		return s.importFP8(layer, pages, k, v)
	}
	return s.copyPages(layer, pages, k, v, func(p int32, dev cu.DevicePtr, src []float32, raw []uint16) error {
		if err := s.back(int(p)); err != nil {
			return err
		}
		if !s.bf {
			return s.g.toDevice(dev, src)
		}
		for j, x := range src {
			raw[j] = bf16Bits(x)
		}
		return cu.MemcpyHtoD(dev, unsafe.Pointer(&raw[0]), int64(len(raw))*2)
	})
}

// copyPages checks an export or import and, on the GPU's thread once the
// kernels already queued (which may write the pages) have run, calls each for
// the K and then the V of every listed page with its device address and host
// values. raw is a page's bf16 staging buffer, nil when the store is float32.
func (s *kvStore) copyPages(layer int, pages []int32, k, v []float32, each func(p int32, dev cu.DevicePtr, host []float32, raw []uint16) error) error {
	return s.onPages(layer, pages, k, v, func(per int) error {
		var raw []uint16
		if s.bf {
			raw = make([]uint16, per)
		}
		for i, p := range pages {
			off := cu.DevicePtr(int64(p) * s.pageBytes())
			if err := each(p, s.k[layer]+off, k[i*per:(i+1)*per], raw); err != nil {
				return err
			}
			if err := each(p, s.v[layer]+off, v[i*per:(i+1)*per], raw); err != nil {
				return err
			}
		}
		return nil
	})
}

// onPages checks an export or import and calls f with a page's values on
// the GPU's thread once the kernels already queued (which may write the
// pages) have run.
func (s *kvStore) onPages(layer int, pages []int32, k, v []float32, f func(per int) error) error {
	per, err := s.checkPages(layer, pages, len(k), len(v))
	if err != nil {
		return err
	}
	if err := s.g.Err(); err != nil {
		return err
	}
	return s.g.own.do(func() error {
		if err := s.g.flush(); err != nil {
			return err
		}
		if err := cu.Synchronize(); err != nil {
			return err
		}
		return f(per)
	})
}

// bf16Bits rounds x to bf16 to nearest even, as the device conversion does;
// a value that came from bf16 comes back unchanged.
func bf16Bits(x float32) uint16 {
	b := math.Float32bits(x)
	if math.IsNaN(float64(x)) {
		return uint16(b>>16) | 0x40 // keep a NaN a (quiet) NaN
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// checkPages validates an export or import and returns a page's values.
func (s *kvStore) checkPages(layer int, pages []int32, nk, nv int) (int, error) {
	per, err := s.spec.CheckPages(layer, pages, nk, nv)
	if err != nil {
		return 0, fmt.Errorf("cuda: %w", err)
	}
	if s.k == nil {
		return 0, fmt.Errorf("cuda: the KV store is closed")
	}
	return per, nil
}

// exportFP8 dequantizes the listed pages of one layer to the host
// ([PageSize][Heads·HeadDim] each, V transposed back).
func (s *kvStore) exportFP8(layer int, pages []int32, k, v []float32) error {
	return s.onPages(layer, pages, k, v, func(per int) error {
		if !s.calibrated[layer] {
			// Never written: its pages hold zeros (or nothing yet).
			clear(k[:len(pages)*per])
			clear(v[:len(pages)*per])
			return nil
		}
		sc, err := s.hostScales(layer)
		if err != nil {
			return err
		}
		raw := make([]byte, s.pageBytes())
		cols, rows, hd, h := s.spec.Heads*s.spec.HeadDim, s.rows(), s.spec.HeadDim, s.spec.Heads
		for i, p := range pages {
			kd, vd := k[i*per:(i+1)*per], v[i*per:(i+1)*per]
			if !s.backed[p] {
				clear(kd)
				clear(vd)
				continue
			}
			off := cu.DevicePtr(int64(p) * s.pageBytes())
			if err := cu.MemcpyDtoH(unsafe.Pointer(&raw[0]), s.k[layer]+off, int64(len(raw))); err != nil {
				return err
			}
			for j := range kd {
				kd[j] = e4m3.Value(raw[j]) * sc[j%cols/hd]
			}
			if err := cu.MemcpyDtoH(unsafe.Pointer(&raw[0]), s.v[layer]+off, int64(len(raw))); err != nil {
				return err
			}
			for j := range vd {
				r, c := j/cols, j%cols
				vd[j] = e4m3.Value(raw[fp8VtAt(r, c, rows)]) * sc[h+c/hd]
			}
		}
		return nil
	})
}

// importFP8 quantizes host K and V into the listed pages of one layer,
// setting the layer's scales from them first if it has none.
func (s *kvStore) importFP8(layer int, pages []int32, k, v []float32) error {
	cols, rows, hd, h := s.spec.Heads*s.spec.HeadDim, s.rows(), s.spec.HeadDim, s.spec.Heads
	return s.onPages(layer, pages, k, v, func(per int) error {
		var sc []float32
		var err error
		if s.calibrated[layer] {
			if sc, err = s.hostScales(layer); err != nil {
				return err
			}
		} else {
			// As on the device (NaN, rows never written, is ignored).
			sc = append(e4m3.Scales(k[:len(pages)*per], h, hd), e4m3.Scales(v[:len(pages)*per], h, hd)...)
			if err := cu.MemcpyHtoD(s.layerScales(layer), unsafe.Pointer(&sc[0]), int64(len(sc))*4); err != nil {
				return err
			}
			s.calibrated[layer] = true
		}
		raw := make([]byte, s.pageBytes())
		for i, p := range pages {
			if err := s.back(int(p)); err != nil {
				return err
			}
			off := cu.DevicePtr(int64(p) * s.pageBytes())
			clear(raw)
			for j, x := range k[i*per : (i+1)*per] {
				raw[j] = e4m3.Bits(x / sc[j%cols/hd])
			}
			if err := cu.MemcpyHtoD(s.k[layer]+off, unsafe.Pointer(&raw[0]), int64(len(raw))); err != nil {
				return err
			}
			clear(raw)
			for j, x := range v[i*per : (i+1)*per] {
				r, c := j/cols, j%cols
				raw[fp8VtAt(r, c, rows)] = e4m3.Bits(x / sc[h+c/hd])
			}
			if err := cu.MemcpyHtoD(s.v[layer]+off, unsafe.Pointer(&raw[0]), int64(len(raw))); err != nil {
				return err
			}
		}
		return nil
	})
}

// hostScales copies a layer's FP8 scales to the host: K's per head, then
// V's (owner thread).
func (s *kvStore) hostScales(layer int) ([]float32, error) {
	sc := make([]float32, 2*s.spec.Heads)
	if err := cu.MemcpyDtoH(unsafe.Pointer(&sc[0]), s.layerScales(layer), int64(len(sc))*4); err != nil {
		return nil, err
	}
	return sc, nil
}
