package cpu

import (
	"fmt"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/backend/e4m3"
)

// The CPU store can be saved and restored with a session. An fp8 store
// restored before its layer was written takes the layer's scales from the
// restored values (as the GPU's does), and rounds them at its scales.
var _ backend.KVSnapshotter = (*kvStore)(nil)

// ExportKV copies the rows of the listed pages of one layer into k and v.
func (s *kvStore) ExportKV(layer int, pages []int32, k, v []float32) error {
	page, err := s.checkPages(layer, pages, len(k), len(v))
	if err != nil {
		return err
	}
	ks, vs := s.arrays(layer)
	for i, p := range pages {
		src := int(p) * page
		copy(k[i*page:(i+1)*page], ks[src:src+page])
		copy(v[i*page:(i+1)*page], vs[src:src+page])
	}
	return nil
}

// ImportKV writes k and v into the listed pages of one layer.
func (s *kvStore) ImportKV(layer int, pages []int32, k, v []float32) error {
	page, err := s.checkPages(layer, pages, len(k), len(v))
	if err != nil {
		return err
	}
	if s.fp8 && s.scales[layer] == nil {
		h, d := s.spec.Heads, s.spec.HeadDim
		n := len(pages) * page
		s.scales[layer] = append(e4m3.Scales(k[:n], h, d), e4m3.Scales(v[:n], h, d)...)
	}
	kd, vd := s.arrays(layer)
	for i, p := range pages {
		dst := int(p) * page
		if s.fp8 {
			s.writeFP8(layer, dst, k[i*page:(i+1)*page], v[i*page:(i+1)*page])
			continue
		}
		copy(kd[dst:dst+page], k[i*page:(i+1)*page])
		copy(vd[dst:dst+page], v[i*page:(i+1)*page])
	}
	return nil
}

// checkPages validates an export or import and returns a page's values.
func (s *kvStore) checkPages(layer int, pages []int32, nk, nv int) (int, error) {
	page, err := s.spec.CheckPages(layer, pages, nk, nv)
	if err != nil {
		return 0, fmt.Errorf("cpu: %w", err)
	}
	return page, nil
}
