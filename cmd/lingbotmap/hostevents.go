package main

import (
	"fmt"
	"runtime/metrics"
	"sort"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// hostEvents counts, frame by frame, what can take the host away from
// queueing the device's work: Go GC cycles, and the backend's host work
// (graphs recorded, device allocations and frees). A frame is charged with
// what happened between the reading after the frame before it and the
// reading after it.
type hostEvents struct {
	gcSample []metrics.Sample
	work     backend.HostWorkReporter // nil: the stream does not count it
	// readings[0] is taken at the start, readings[i+1] after frame i.
	readings []hostCount
}

// hostCount is what a frame was charged with, or a running total.
type hostCount struct {
	gc uint64
	backend.HostWork
}

func (c hostCount) minus(o hostCount) hostCount {
	return hostCount{gc: c.gc - o.gc, HostWork: backend.HostWork{
		GraphsRecorded: c.GraphsRecorded - o.GraphsRecorded,
		DeviceAllocs:   c.DeviceAllocs - o.DeviceAllocs,
		DeviceFrees:    c.DeviceFrees - o.DeviceFrees,
	}}
}

func (c hostCount) any() bool {
	return c.gc > 0 || c.GraphsRecorded > 0 || c.DeviceAllocs > 0 || c.DeviceFrees > 0
}

const gcCyclesMetric = "/gc/cycles/total:gc-cycles"

func newHostEvents(st any) *hostEvents {
	h := &hostEvents{gcSample: []metrics.Sample{{Name: gcCyclesMetric}}}
	if r, ok := st.(backend.HostWorkReporter); ok {
		h.work = r
	}
	h.readings = []hostCount{h.read()}
	return h
}

func (h *hostEvents) read() hostCount {
	var c hostCount
	metrics.Read(h.gcSample)
	if h.gcSample[0].Value.Kind() == metrics.KindUint64 {
		c.gc = h.gcSample[0].Value.Uint64()
	}
	if h.work != nil {
		c.HostWork = h.work.HostWork()
	}
	return c
}

// frame takes the reading after the next frame.
func (h *hostEvents) frame() { h.readings = append(h.readings, h.read()) }

// summary describes frames [from, len) against their times (ms): the events
// in them, and the times of the frames with any against those without, so
// that a slow frame can be told to be the host's.
func (h *hostEvents) summary(times []float64, from int) string {
	end := min(len(times), len(h.readings)-1)
	sum := h.readings[end].minus(h.readings[from])
	var with, without []float64
	for i := from; i < end; i++ {
		if h.readings[i+1].minus(h.readings[i]).any() {
			with = append(with, times[i])
		} else {
			without = append(without, times[i])
		}
	}
	part := func(name string, ts []float64) string {
		if len(ts) == 0 {
			return fmt.Sprintf("0 frames %s", name)
		}
		sort.Float64s(ts)
		return fmt.Sprintf("%d frames %s: median %.1f ms, max %.1f ms", len(ts), name, ts[len(ts)/2], ts[len(ts)-1])
	}
	return fmt.Sprintf("host events in the steady state: %d Go GC cycles ended, %d graphs recorded, %d device allocations, %d device frees; %s; %s",
		sum.gc, sum.GraphsRecorded, sum.DeviceAllocs, sum.DeviceFrees, part("with one", with), part("without", without))
}
