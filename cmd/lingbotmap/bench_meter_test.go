package main

import (
	"errors"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/pipeline"
	"github.com/lingbotmap/lingbotmap/node"
)

// The meter keeps one record per frame sent, by sequence number: stage
// times, and for a frame that gave a pose its latency and time since the
// first frame; a failed frame is reported but not OK; reports past the
// frames sent are counted only; memory is sampled every memEvery reports.
func TestBenchMeter(t *testing.T) {
	m := newBenchMeter(3, 2)
	t0 := time.Unix(1700000000, 0)
	m.began(t0)
	arrived := t0.Add(10 * time.Millisecond)
	m.Add(node.FrameReport{Seq: 1, Kind: engine.Keyframe, Window: 2, PoseWritten: arrived.Add(40 * time.Millisecond),
		Timing: pipeline.Timing{Arrived: arrived, Queue: 5 * time.Millisecond, Model: 30 * time.Millisecond}, Deliver: time.Millisecond})
	m.Add(node.FrameReport{Seq: 0, Err: errors.New("truncated"), Stage: "decode"})
	m.Add(node.FrameReport{Seq: 7, PoseWritten: arrived})
	r := m.recs[1]
	if !r.OK || !r.Reported || r.Kind != "keyframe" || r.Window != 2 || r.LatencyMs != 40 || r.PoseAtMs != 50 || r.QueueMs != 5 || r.ModelMs != 30 || r.DeliverMs != 1 {
		t.Errorf("frame 1: %+v", r)
	}
	if r := m.recs[0]; r.OK || !r.Reported || r.LatencyMs != 0 {
		t.Errorf("the failed frame: %+v", r)
	}
	if m.recs[2].Reported || m.done != 3 {
		t.Errorf("frame 2 never reported: %+v; %d reports", m.recs[2], m.done)
	}
	if len(m.mem) != 1 || m.mem[0].Frames != 2 || m.mem[0].RSSMB <= 0 || m.mem[0].GoHeapMB <= 0 {
		t.Errorf("memory samples %+v: want one after the second report", m.mem)
	}
}
