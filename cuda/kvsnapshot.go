//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// The GPU store can be saved and restored with a session: pages are copied
// to the host and back, bf16 pages widened to float32 on the way out and
// rounded back on the way in, which restores them bit for bit.
var _ backend.KVSnapshotter = (*kvStore)(nil)

// ExportKV copies the listed pages of one layer to the host.
func (s *kvStore) ExportKV(layer int, pages []int32, k, v []float32) error {
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
	per, err := s.checkPages(layer, pages, len(k), len(v))
	if err != nil {
		return err
	}
	if err := s.g.Err(); err != nil {
		return err
	}
	return s.g.own.do(func() error {
		if err := cu.Synchronize(); err != nil {
			return err
		}
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
