package model

import (
	"errors"
	"fmt"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/binstate"
	"github.com/lingbotmap/lingbotmap/engine/kvcache"
)

// A model's state for a saved session is everything a next call depends on:
// the resolution, the RoPE frame counter, the KV cache's page bookkeeping,
// the K and V of the pages in use (scale, live and special pages) and the
// camera head's caches. Free pages are not saved: nothing reads them before
// they are written again.

// maxSide bounds the resolution a state file may name.
const maxSide = 1 << 14

// kvChunkPages is how many pages one KV copy moves, to bound the host buffer.
const kvChunkPages = 8

// SaveState writes the model's caches. It fails when a deferred frame is
// neither committed nor rolled back, or when the backend's KV store cannot
// be copied out (backend.KVSnapshotter).
func (m *Model) SaveState(w *binstate.Writer) error {
	if m.closed {
		return errors.New("model: SaveState after Close")
	}
	if m.busy != nil {
		return ErrBusy
	}
	if m.pending {
		return ErrPending
	}
	w.Bool(m.cache != nil)
	if m.cache == nil {
		return w.Err()
	}
	w.Int(m.h)
	w.Int(m.w)
	w.Int(m.committed)
	st := m.cache.State()
	for _, l := range [][]int32{st.Scale, st.Live, st.FreePatch, st.Special, st.FreeSpecial} {
		w.I32s(l)
	}
	w.Int(st.SpecialCount)
	w.Int(st.FrameCount)
	w.Bool(st.DeferEvict)
	w.Bool(st.CanRollback)
	w.Int(st.LastSpecial)

	snap, ok := m.store.(backend.KVSnapshotter)
	if !ok {
		return fmt.Errorf("model: the %s backend's KV cache cannot be saved", m.be.Name())
	}
	if err := m.eachKVChunk(st.InUse(), func(layer int, pages []int32, k, v []float32) error {
		if err := snap.ExportKV(layer, pages, k, v); err != nil {
			return err
		}
		w.F32Raw(k)
		w.F32Raw(v)
		return w.Err()
	}); err != nil {
		return fmt.Errorf("model: saving the KV cache: %w", err)
	}

	cam := &m.cam
	w.Int(cam.frames)
	if cam.frames > 0 {
		for i := range cam.k {
			for j := range cam.k[i] {
				w.F32s(m.be.ToHost(cam.k[i][j]))
				w.F32s(m.be.ToHost(cam.v[i][j]))
			}
		}
	}
	return w.Err()
}

// LoadState replaces the model's caches with a state SaveState wrote for the
// same weights and options. allow, when set, vets the saved resolution
// before the caches are sized for it. On error the model is reset (empty
// caches).
func (m *Model) LoadState(r *binstate.Reader, allow func(h, w int) error) error {
	if m.closed {
		return errors.New("model: LoadState after Close")
	}
	if err := m.loadState(r, allow); err != nil {
		m.Reset()
		return fmt.Errorf("model: restoring the caches: %w", err)
	}
	return nil
}

func (m *Model) loadState(r *binstate.Reader, allow func(h, w int) error) error {
	m.Reset()
	if !r.Bool("cache present") {
		return r.Err()
	}
	h := r.Int("height", 1, maxSide)
	w := r.Int("width", 1, maxSide)
	committed := r.Int("committed frames", 0, m.opt.MaxFrames)
	if err := r.Err(); err != nil {
		return err
	}
	ps := m.sizes.PatchSize
	if h%ps != 0 || w%ps != 0 {
		return fmt.Errorf("%w: resolution %d×%d is not a multiple of the patch size %d", binstate.ErrCorrupt, w, h, ps)
	}
	if allow != nil {
		if err := allow(h, w); err != nil {
			return err
		}
	}
	if err := m.ensureCache(h, w, (h/ps)*(w/ps)); err != nil {
		return err
	}
	n := m.cache.NumPages()
	var st kvcache.State
	for _, l := range []*[]int32{&st.Scale, &st.Live, &st.FreePatch, &st.Special, &st.FreeSpecial} {
		*l = r.I32s("page list", n)
	}
	st.SpecialCount = r.Int("special tokens", 0, n*m.cache.Config().PageSize)
	st.FrameCount = r.Int("cached frames", 0, m.opt.MaxFrames)
	st.DeferEvict = r.Bool("deferred eviction")
	st.CanRollback = r.Bool("rollback flag")
	st.LastSpecial = r.Int("last special count", 0, kvcache.SpecialPerFrame*8)
	if err := r.Err(); err != nil {
		return err
	}
	if err := m.cache.SetState(st); err != nil {
		return fmt.Errorf("%w: %w", binstate.ErrCorrupt, err)
	}
	snap, ok := m.store.(backend.KVSnapshotter)
	if !ok {
		return fmt.Errorf("the %s backend's KV cache cannot be restored", m.be.Name())
	}
	if err := m.eachKVChunk(st.InUse(), func(layer int, pages []int32, k, v []float32) error {
		r.F32Raw(k)
		r.F32Raw(v)
		if err := r.Err(); err != nil {
			return err
		}
		return snap.ImportKV(layer, pages, k, v)
	}); err != nil {
		return err
	}

	cam := &m.cam
	frames := r.Int("camera frames", 0, 1<<24)
	if err := r.Err(); err != nil {
		return err
	}
	if frames > 0 {
		for i := range cam.k {
			for j, blk := range m.camera.trunk {
				k := r.F32s("camera keys", frames*blk.heads*blk.hd)
				v := r.F32s("camera values", frames*blk.heads*blk.hd)
				if err := r.Err(); err != nil {
					return err
				}
				if len(k) != frames*blk.heads*blk.hd || len(v) != len(k) {
					return fmt.Errorf("%w: camera cache %d/%d holds %d values for %d frames", binstate.ErrCorrupt, i, j, len(k), frames)
				}
				cam.k[i][j] = m.be.FromHost(k, frames, blk.heads, blk.hd)
				cam.v[i][j] = m.be.FromHost(v, frames, blk.heads, blk.hd)
			}
		}
	}
	cam.frames = frames
	m.committed = committed
	return nil
}

// eachKVChunk calls f for every layer with up to kvChunkPages pages at a
// time and host buffers of the right size.
func (m *Model) eachKVChunk(pages []int32, f func(layer int, pages []int32, k, v []float32) error) error {
	per := m.storeSpec.PageSize * m.storeSpec.Heads * m.storeSpec.HeadDim
	nb := min(len(pages), kvChunkPages) * per
	k, v := make([]float32, nb), make([]float32, nb)
	for l := 0; l < m.storeSpec.Layers; l++ {
		for i := 0; i < len(pages); i += kvChunkPages {
			p := pages[i:min(i+kvChunkPages, len(pages))]
			if err := f(l, p, k[:len(p)*per], v[:len(p)*per]); err != nil {
				return err
			}
		}
	}
	return nil
}
