package mapio

import (
	"fmt"
	"time"

	"github.com/lingbotmap/lingbotmap/engine/binstate"
	"github.com/lingbotmap/lingbotmap/engine/geom"
)

// maxStateItems bounds the poses and voxels a saved map may declare.
const maxStateItems = 1 << 31

// SaveState writes the map's whole state for a saved session: the
// trajectory and every voxel's sums in insertion order, so that a restored
// map goes on exactly as this one would.
func (m *Map) SaveState(w *binstate.Writer) error {
	w.F64(m.cfg.VoxelSize)
	w.I64(m.pointsIn)
	w.Int(len(m.path))
	for _, p := range m.path {
		w.I64(int64(p.Seq))
		w.Bool(p.Stamp.IsZero())
		if !p.Stamp.IsZero() {
			w.I64(p.Stamp.UnixNano())
		}
		for _, row := range p.CamToWorld {
			for _, v := range row {
				w.F64(v)
			}
		}
	}
	w.Int(m.grid.Len())
	m.grid.each(func(k [3]int32, a voxelAcc) {
		for _, c := range k {
			w.U32(uint32(c))
		}
		for _, v := range [...]float64{a.x, a.y, a.z, a.r, a.g, a.b, a.n} {
			w.F64(v)
		}
	})
	return w.Err()
}

// LoadState replaces the map's state with one SaveState wrote for the same
// voxel size. On error the map is left empty.
func (m *Map) LoadState(r *binstate.Reader) error {
	m.Reset()
	if err := m.loadState(r); err != nil {
		m.Reset()
		return fmt.Errorf("mapio: restoring the map: %w", err)
	}
	return nil
}

func (m *Map) loadState(r *binstate.Reader) error {
	if size := r.F64(); r.Err() == nil && size != m.cfg.VoxelSize {
		return fmt.Errorf("saved with voxel size %g, this map uses %g", size, m.cfg.VoxelSize)
	}
	pointsIn := r.I64()
	n := r.Int("poses", 0, maxStateItems)
	for i := 0; i < n && r.Err() == nil; i++ {
		seq := uint64(r.I64())
		var stamp time.Time
		if !r.Bool("zero stamp") {
			stamp = time.Unix(0, r.I64())
		}
		var c geom.Mat4
		for a := range c {
			for b := range c[a] {
				c[a][b] = r.F64()
			}
		}
		if r.Err() != nil {
			break
		}
		if err := m.AddPose(seq, stamp, c); err != nil {
			return err
		}
	}
	nv := r.Int("voxels", 0, maxStateItems)
	g := m.grid
	for i := 0; i < nv && r.Err() == nil; i++ {
		var k [3]int32
		for j := range k {
			k[j] = int32(r.U32())
		}
		var a voxelAcc
		for _, p := range []*float64{&a.x, &a.y, &a.z, &a.r, &a.g, &a.b, &a.n} {
			*p = r.F64()
		}
		if g.has(k) && r.Err() == nil {
			return fmt.Errorf("%w: voxel %v listed twice", binstate.ErrCorrupt, k)
		}
		if !(a.n >= 1) && r.Err() == nil {
			return fmt.Errorf("%w: voxel %v holds %g points", binstate.ErrCorrupt, k, a.n)
		}
		if r.Err() == nil {
			g.restore(k, a)
		}
	}
	if err := r.Err(); err != nil {
		return err
	}
	m.pointsIn = pointsIn
	return nil
}
