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
	per, err := s.checkPages(layer, pages, len(k), len(v))
	if err != nil {
		return err
	}
	if err := s.g.Err(); err != nil {
		return err
	}
	return s.g.own.do(func() error {
		// kernels still queued may write the pages
		if err := cu.Synchronize(); err != nil {
			return err
		}
		var raw []uint16
		if s.bf {
			raw = make([]uint16, per)
		}
		for i, p := range pages {
			for _, side := range [2]struct {
				base cu.DevicePtr
				dst  []float32
			}{{s.k[layer], k[i*per : (i+1)*per]}, {s.v[layer], v[i*per : (i+1)*per]}} {
				if !s.backed[p] {
					clear(side.dst) // a page without memory reads as zeros when it gets some
					continue
				}
				src := side.base + cu.DevicePtr(int64(p)*s.pageBytes())
				if !s.bf {
					if err := s.g.toHost(side.dst, src); err != nil {
						return err
					}
					continue
				}
				if err := cu.MemcpyDtoH(unsafe.Pointer(&raw[0]), src, int64(per)*2); err != nil {
					return err
				}
				for j, b := range raw {
					side.dst[j] = math.Float32frombits(uint32(b) << 16)
				}
			}
		}
		return nil
	})
}

// ImportKV writes host K and V into the listed pages of one layer.
func (s *kvStore) ImportKV(layer int, pages []int32, k, v []float32) error {
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
			if err := s.back(int(p)); err != nil {
				return err
			}
			for _, side := range [2]struct {
				base cu.DevicePtr
				src  []float32
			}{{s.k[layer], k[i*per : (i+1)*per]}, {s.v[layer], v[i*per : (i+1)*per]}} {
				dst := side.base + cu.DevicePtr(int64(p)*s.pageBytes())
				if !s.bf {
					if err := s.g.toDevice(dst, side.src); err != nil {
						return err
					}
					continue
				}
				for j, x := range side.src {
					raw[j] = bf16Bits(x)
				}
				if err := cu.MemcpyHtoD(dst, unsafe.Pointer(&raw[0]), int64(per)*2); err != nil {
					return err
				}
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
	per := s.spec.PageSize * s.spec.Heads * s.spec.HeadDim
	if layer < 0 || layer >= s.spec.Layers {
		return 0, fmt.Errorf("cuda: KV layer %d of %d", layer, s.spec.Layers)
	}
	if nk != len(pages)*per || nv != nk {
		return 0, fmt.Errorf("cuda: KV copy of %d pages needs %d values for K and V, got %d and %d", len(pages), len(pages)*per, nk, nv)
	}
	for _, p := range pages {
		if p < 0 || int(p) >= s.spec.Pages {
			return 0, fmt.Errorf("cuda: KV page %d of %d", p, s.spec.Pages)
		}
	}
	if s.k == nil {
		return 0, fmt.Errorf("cuda: the KV store is closed")
	}
	return per, nil
}
