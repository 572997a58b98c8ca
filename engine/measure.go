package engine

import (
	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/geom"
)

// Aligner is a Stream that reports its window alignments (windowed mode).
type Aligner interface {
	// Alignments returns the similarity of every window so far: the
	// reference's chunk_scales and chunk_transforms.
	Alignments() []geom.Similarity
}

// What New's streams offer beyond Stream: the backend's measuring hooks
// (bench) and the window alignments (verify).
var (
	_ Aligner                  = (*stream)(nil)
	_ Preparer                 = (*stream)(nil)
	_ backend.MemoryReporter   = (*stream)(nil)
	_ backend.Profiler         = (*stream)(nil)
	_ backend.HostWorkReporter = (*stream)(nil)
)

// Alignments returns the similarity of every window so far (windowed mode):
// the reference's chunk_scales and chunk_transforms.
func (s *stream) Alignments() []geom.Similarity {
	return append([]geom.Similarity(nil), s.sims...)
}

// Stats describes the cache.
func (s *stream) Stats() CacheStats {
	st := s.m.Stats()
	return CacheStats{
		FrameCount: st.FrameCount, ScalePages: st.ScalePages, LivePages: st.LivePages,
		FreePages: st.FreePages, SpecialTokens: st.SpecialTokens, VisiblePages: st.VisiblePages,
		LastPageLen: st.LastPageLen, PageSize: st.PageSize,
		CameraFrames: s.m.CameraFrames(), KVBytes: s.m.KVBytes(),
		Window: s.win.index, FramesIn: s.framesIn,
		PointsOnDevice: s.devicePoints.Load(),
	}
}

// ResetMemoryPeak starts the backend's peak device memory afresh, where it
// tracks one.
func (s *stream) ResetMemoryPeak() {
	if r, ok := s.be.(backend.MemoryReporter); ok {
		r.ResetMemoryPeak()
	}
}

// RestartProfile starts the backend's operation profile afresh, where it
// keeps one.
func (s *stream) RestartProfile() {
	if r, ok := s.be.(backend.Profiler); ok {
		r.RestartProfile()
	}
}

// HostWork is the backend's count of its host work, or zeros where it keeps
// none (the CPU backend).
func (s *stream) HostWork() backend.HostWork {
	if r, ok := s.be.(backend.HostWorkReporter); ok {
		return r.HostWork()
	}
	return backend.HostWork{}
}

// MemoryUsage reports the backend's device memory (current, peak) in bytes,
// or zeros when the backend does not track it (the CPU backend).
func (s *stream) MemoryUsage() (current, peak int64) {
	if m, ok := s.be.(backend.MemoryReporter); ok {
		return m.MemoryUsage()
	}
	return 0, 0
}

// MemoryParts is the backend's breakdown of the memory it holds, where it
// keeps one.
func (s *stream) MemoryParts() []backend.MemoryPart {
	if m, ok := s.be.(backend.MemoryParter); ok {
		return m.MemoryParts()
	}
	return nil
}
