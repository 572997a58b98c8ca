package pipeline

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/cpu"
)

// A stream with overlap_frames holds each streaming frame's results until
// the next frame: the pipeline hands a held frame out as soon as no next
// frame waits (a camera slower than the model never waits for the next
// frame to see the last one's pose), and otherwise queues the next frame
// first; either way every output comes once, in order, with the results
// Push gives without overlap.
func TestOverlapStreamDrainsWhenIdle(t *testing.T) {
	const n = 10
	serial := tinyStream(t)
	var want []engine.Result
	for i := range n {
		res, err := serial.Push(context.Background(), engine.Frame{Seq: uint64(i), Image: testImage(i)})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, res...)
	}
	cfg := engine.DefaultConfig()
	cfg.ImageWidth, cfg.ScaleFrames, cfg.SlidingWindow, cfg.Threads = 70, 3, 4, 1
	cfg.OverlapFrames = true
	st, err := engine.New(context.Background(), cfg, func(c engine.Config) (backend.Backend, error) {
		return cpu.New(cpu.Config{Threads: c.Threads}), nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })

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
		if i >= cfg.ScaleFrames-1 {
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
	}
}
