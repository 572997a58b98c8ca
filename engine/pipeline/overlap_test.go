package pipeline

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/backend/hostpoints"
	"github.com/lingbotmap/lingbotmap/engine/cpu"
	"github.com/lingbotmap/lingbotmap/engine/geom"
)

// hostPoints is the CPU backend with the device points' capabilities
// (backend.AsyncUnprojector), the points made on the host at Wait.
type hostPoints struct {
	backend.Backend
	queued int
}

func (h *hostPoints) Unproject(depth, conf backend.Tensor, u backend.Unprojection) ([]float32, []int32, error) {
	return hostpoints.Unproject(h, depth, conf, u)
}

func (h *hostPoints) StartUnproject(depth, conf backend.Tensor, u backend.Unprojection) backend.PendingPoints {
	h.queued++
	return hostPending(func() ([]float32, []int32, error) { return h.Unproject(depth, conf, u) })
}

type hostPending func() ([]float32, []int32, error)

func (p hostPending) Wait() ([]float32, []int32, error) { return p() }

// A stream with overlap_frames holds each streaming frame's results until
// the next frame (a frame with device points the backend queues, until
// the one after): the pipeline hands the held frames out as soon as no
// next frame waits (a camera slower than the model never waits for the
// next frame to see the last one's pose), and otherwise queues the next
// frame first; either way every output comes once, in order, with the
// results Push gives without overlap, device points included. The same
// with encode_beside_heads, whose held frames wait for the next frame's
// encoder before their heads run: a drain runs them alone.
func TestOverlapStreamDrainsWhenIdle(t *testing.T) {
	for _, points := range []bool{false, true} {
		for _, beside := range []bool{false, true} {
			t.Run(fmt.Sprintf("device points %v, encoder beside the heads %v", points, beside), func(t *testing.T) { drainsWhenIdle(t, points, beside) })
		}
	}
}

func drainsWhenIdle(t *testing.T, points, beside bool) {
	const n, scaleFrames = 10, 3
	var hp *hostPoints
	stream := func(overlap bool) engine.Stream {
		cfg := engine.DefaultConfig()
		cfg.ImageWidth, cfg.ScaleFrames, cfg.SlidingWindow, cfg.Threads = 70, scaleFrames, 4, 1
		cfg.OverlapFrames, cfg.EncodeBesideHeads = overlap, overlap && beside
		st, err := engine.New(context.Background(), cfg, func(c engine.Config) (backend.Backend, error) {
			var be backend.Backend = cpu.New(cpu.Config{Threads: c.Threads})
			if points {
				hp = &hostPoints{Backend: be}
				be = hp
			}
			return be, nil
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		if points {
			if on, err := st.(engine.PointMaker).MakePoints(geom.PointFilter{ConfThreshold: 1, Stride: 2}, false); err != nil || !on {
				t.Fatalf("MakePoints: %v, %v", on, err)
			}
		}
		return st
	}
	serial := stream(false)
	var want []engine.Result
	for i := range n {
		res, err := serial.Push(context.Background(), engine.Frame{Seq: uint64(i), Image: testImage(i)})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, res...)
	}
	st := stream(true)

	outs := make(chan Output[int], n)
	p, err := New(context.Background(), st, &testSink{add: func(o Output[int]) { outs <- o }}, Config[int]{Workers: 2, Policy: Block})
	if err != nil {
		t.Fatal(err)
	}
	var got []Output[int]
	wait := func(seq int) {
		t.Helper()
		for len(got) <= seq {
			select {
			case o := <-outs:
				got = append(got, o)
			case <-time.After(time.Minute):
				t.Fatalf("frame %d: no output a minute after it was submitted alone (outputs so far %d)", seq, len(got))
			}
		}
	}
	// one at a time, as a slow camera: each output comes before the next
	// frame is submitted
	for i := range n / 2 {
		if err := p.Submit(context.Background(), Input[int]{Seq: uint64(i), Meta: i, Image: testImage(i)}); err != nil {
			t.Fatal(err)
		}
		if i >= scaleFrames-1 {
			wait(i)
		}
	}
	// the rest at once
	for i := n / 2; i < n; i++ {
		if err := p.Submit(context.Background(), Input[int]{Seq: uint64(i), Meta: i, Image: testImage(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(outs)
	for o := range outs {
		got = append(got, o)
	}
	if len(got) != n || len(want) != n {
		t.Fatalf("%d outputs, %d serial results, for %d frames", len(got), len(want), n)
	}
	for i, o := range got {
		if o.Err != nil || o.Result == nil || o.Seq != uint64(i) || o.Meta != i {
			t.Fatalf("output %d: frame %d (meta %d), err %v", i, o.Seq, o.Meta, o.Err)
		}
		g, w := o.Result, want[i]
		if g.Seq != w.Seq || g.Kind != w.Kind || g.PoseEnc != w.PoseEnc || !slices.Equal(g.Depth, w.Depth) || !slices.Equal(g.Conf, w.Conf) || !slices.Equal(g.RGB, w.RGB) {
			t.Fatalf("frame %d differs from Push without overlap", i)
		}
		if (g.Kept == nil) != (w.Kept == nil) || (g.Kept != nil && (!slices.Equal(g.Kept.XYZ, w.Kept.XYZ) || !slices.Equal(g.Kept.Pixel, w.Kept.Pixel))) {
			t.Fatalf("frame %d: device points differ from Push without overlap", i)
		}
		if points != (g.Kept != nil) {
			t.Fatalf("frame %d: device points %v", i, g.Kept != nil)
		}
	}
	if points && hp.queued == 0 {
		t.Fatal("no frame's points were queued ahead")
	}
}
