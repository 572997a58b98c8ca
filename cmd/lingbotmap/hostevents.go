package main

import (
	"fmt"
	"runtime/metrics"
	"sort"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// hostEvents counts, frame by frame, what takes the host away from queueing
// the device's work: Go GC cycles and graphs being recorded (a backend that
// records them). A frame is charged with what happened between the reading
// after the frame before it and the reading after it.
type hostEvents struct {
	gcSample []metrics.Sample
	graphs   backend.GraphRecorder // nil: the stream has no backend that records graphs
	lastGC   uint64
	lastCap  int64
	gc       []uint64 // per frame
	captures []int64
}

const gcCyclesMetric = "/gc/cycles/total:gc-cycles"

func newHostEvents(st any) *hostEvents {
	h := &hostEvents{gcSample: []metrics.Sample{{Name: gcCyclesMetric}}}
	if r, ok := st.(backend.GraphRecorder); ok {
		h.graphs = r
	}
	h.lastGC, h.lastCap = h.read()
	return h
}

func (h *hostEvents) read() (gc uint64, captures int64) {
	metrics.Read(h.gcSample)
	if h.gcSample[0].Value.Kind() == metrics.KindUint64 {
		gc = h.gcSample[0].Value.Uint64()
	}
	if h.graphs != nil {
		captures = h.graphs.GraphCaptures()
	}
	return gc, captures
}

// frame records the events since the last call as the next frame's.
func (h *hostEvents) frame() {
	gc, c := h.read()
	h.gc = append(h.gc, gc-h.lastGC)
	h.captures = append(h.captures, c-h.lastCap)
	h.lastGC, h.lastCap = gc, c
}

// summary describes frames [from, len) against their times (ms): how many
// GC cycles ended and graphs were recorded in them, and the times of the
// frames with either against those without, so that a slow frame can be
// told to be the host's.
func (h *hostEvents) summary(times []float64, from int) string {
	var gcs uint64
	var caps int64
	var with, without []float64
	for i := from; i < len(times) && i < len(h.gc); i++ {
		gcs += h.gc[i]
		caps += h.captures[i]
		if h.gc[i] > 0 || h.captures[i] > 0 {
			with = append(with, times[i])
		} else {
			without = append(without, times[i])
		}
	}
	s := fmt.Sprintf("host events in the steady state: %d Go GC cycles ended, %d graphs recorded", gcs, caps)
	part := func(name string, ts []float64) string {
		if len(ts) == 0 {
			return fmt.Sprintf("0 frames %s", name)
		}
		sort.Float64s(ts)
		return fmt.Sprintf("%d frames %s: median %.1f ms, max %.1f ms", len(ts), name, ts[len(ts)/2], ts[len(ts)-1])
	}
	return s + "; " + part("with one", with) + "; " + part("without", without)
}
