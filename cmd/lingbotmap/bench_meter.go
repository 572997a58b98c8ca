package main

import (
	"runtime"
	"sync"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/node"
)

// benchMeter is bench --pipeline's meter. It takes the node's report of
// every frame it finished with (node.Options.Observe: in frame order, on
// the node's delivering goroutine, after the node's own sink published the
// frame, so the pose's time and the node's in-order work are known) into
// one frameRecord per frame, and samples memory every memEvery reports.
type benchMeter struct {
	recs     []frameRecord // by sequence number, for the frames sent
	mem      []memSample
	done     int // reports taken
	memEvery int
	start    time.Time // the camera's first frame

	mu     sync.Mutex
	stream engine.Stream // once the node has started it, for device memory
	load   time.Duration // how long starting it took
}

func newBenchMeter(frames, memEvery int) *benchMeter {
	return &benchMeter{recs: make([]frameRecord, frames), memEvery: memEvery}
}

// setStream gives the meter the engine the node started, and how long
// that took.
func (m *benchMeter) setStream(s engine.Stream, load time.Duration) {
	m.mu.Lock()
	m.stream, m.load = s, load
	m.mu.Unlock()
}

// loadTime is how long the engine took to start.
func (m *benchMeter) loadTime() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.load
}

// began marks the camera's first frame, before any is sent: the origin of
// the pose times.
func (m *benchMeter) began(t time.Time) { m.start = t }

// Add takes the report of one frame.
func (m *benchMeter) Add(r node.FrameReport) {
	m.done++
	if r.Seq < uint64(len(m.recs)) {
		t := r.Timing
		fr := frameRecord{Seq: r.Seq, OK: r.Err == nil && !r.PoseWritten.IsZero(), Reported: true, Window: r.Window,
			QueueMs: ms(t.Queue), PrepareMs: ms(t.Prepare), AheadMs: ms(t.Ahead), ModelMs: ms(t.Model), PostMs: ms(t.Post), DeliverMs: ms(r.Deliver)}
		if fr.OK {
			fr.Kind = r.Kind.String()
			fr.LatencyMs = ms(r.PoseWritten.Sub(t.Arrived))
			fr.PoseAtMs = ms(r.PoseWritten.Sub(m.start))
		}
		m.recs[r.Seq] = fr
	}
	if m.memEvery > 0 && m.done%m.memEvery == 0 {
		m.sample(r.Window)
	}
}

// sample records the memory now: the device's as the backend reports it,
// the Go heap and the process's resident set.
func (m *benchMeter) sample(window int) {
	s := memSample{Frames: m.done, Window: window}
	m.mu.Lock()
	stream := m.stream
	m.mu.Unlock()
	if r, ok := stream.(backend.MemoryReporter); ok {
		if c, pk := r.MemoryUsage(); c > 0 || pk > 0 {
			s.DeviceMB, s.DevicePeak, s.deviceKnown = float64(c)/1e6, float64(pk)/1e6, true
		}
	}
	if r, ok := stream.(backend.MemoryParter); ok {
		for _, part := range r.MemoryParts() {
			s.DeviceParts = append(s.DeviceParts, deviceMB{Name: part.Name, MB: float64(part.Bytes) / 1e6})
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.GoHeapMB = float64(ms.HeapAlloc) / 1e6
	rss, peak := procMemory()
	s.RSSMB, s.RSSPeakMB = rss/1e6, peak/1e6
	m.mem = append(m.mem, s)
}
