package pipeline

import (
	"bytes"
	"context"
	"errors"
	"image"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/cpu"
)

// frameMeta stands for a caller's metadata: a header's frame id and an
// input position.
type frameMeta struct {
	FrameID string
	Pos     int
}

// metaSink records every output and every checkpoint's cut.
type metaSink struct {
	outs []Output[frameMeta]
	cuts []Cut[frameMeta]
	// state saves the stream at each checkpoint
	state bytes.Buffer
}

func (s *metaSink) Add(o Output[frameMeta]) { s.outs = append(s.outs, o) }

func (s *metaSink) Checkpoint(_ context.Context, c Cut[frameMeta]) error {
	s.cuts = append(s.cuts, c)
	s.state.Reset()
	return c.Stream.(engine.Snapshotter).SaveState(&s.state)
}

func (s *metaSink) Close(context.Context) error { return nil }

func metaOf(i int) frameMeta { return frameMeta{FrameID: "cam" + string(rune('a'+i)), Pos: 100 + i} }

func submitMeta(t *testing.T, p *Pipeline[frameMeta], from, to int, broken int) {
	t.Helper()
	for i := from; i < to; i++ {
		in := Input[frameMeta]{Seq: uint64(i), Meta: metaOf(i), Image: testImage(i)}
		if i == broken {
			in.Image = nil
			in.Decode = func() (image.Image, error) { return nil, errors.New("truncated JPEG") }
		}
		if err := p.Submit(context.Background(), in); err != nil {
			t.Fatal(err)
		}
	}
}

// checkMeta checks that outs are frames from..to-1 in order, each with its
// own metadata, and returns the outputs by stage.
func checkMeta(t *testing.T, outs []Output[frameMeta], from, to int) map[string][]uint64 {
	t.Helper()
	if len(outs) != to-from {
		t.Fatalf("%d outputs for frames %d..%d", len(outs), from, to-1)
	}
	stages := map[string][]uint64{}
	for k, o := range outs {
		i := from + k
		if o.Seq != uint64(i) || o.Meta != metaOf(i) {
			t.Fatalf("output %d: frame %d with %+v, want frame %d with %+v", k, o.Seq, o.Meta, i, metaOf(i))
		}
		if o.Result != nil && o.Result.Seq != o.Seq {
			t.Fatalf("frame %d carries the result of frame %d", o.Seq, o.Result.Seq)
		}
		stage := o.Stage
		if o.Err == nil {
			stage = "result"
		}
		stages[stage] = append(stages[stage], o.Seq)
	}
	return stages
}

// The caller's metadata comes out with its frame, in order, whatever became
// of the frame: a result, a decoding error, a phase 1 that a reset
// discarded (ErrNoResult). A checkpoint sees the frames the stream holds,
// with their metadata, and a pipeline over the stream resumed from that
// checkpoint gives their results with it.
func TestMetadataRoundTrip(t *testing.T) {
	ctx := context.Background()
	sink := &metaSink{}
	p, err := New(ctx, tinyStream(t), Sink[frameMeta](sink), Config[frameMeta]{Workers: 2, PostWorkers: 2, Policy: Block})
	if err != nil {
		t.Fatal(err)
	}
	reset := func() {
		t.Helper()
		if err := p.Do(ctx, func(c Cut[frameMeta]) error { return c.Stream.Reset() }); err != nil {
			t.Fatal(err)
		}
	}
	// frames 0..5, 2 undecodable: phase 1 on 0, 1 and 3 (3 scale frames)
	submitMeta(t, p, 0, 6, 2)
	reset()
	// a new map: 6 and 7 wait for phase 1 at the checkpoint, 8 completes it
	submitMeta(t, p, 6, 8, -1)
	if err := p.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if len(sink.cuts) != 1 || len(sink.cuts[0].Held) != 2 || sink.cuts[0].Held[0].Meta != metaOf(6) || sink.cuts[0].Held[1].Meta != metaOf(7) {
		t.Fatalf("the checkpoint's cut holds %+v, want frames 6 and 7 with their metadata", sink.cuts)
	}
	saved := append([]byte(nil), sink.state.Bytes()...)
	submitMeta(t, p, 8, 9, -1)
	reset()
	// 9 and 10 wait for phase 1 when a reset discards them; 11 is flushed
	submitMeta(t, p, 9, 11, -1)
	var held []Held[frameMeta]
	if err := p.Do(ctx, func(c Cut[frameMeta]) error { held = c.Held; return c.Stream.Reset() }); err != nil {
		t.Fatal(err)
	}
	if sink.cuts[0].Next != 8 {
		t.Fatalf("the checkpoint's cut says the next frame is %d, want 8", sink.cuts[0].Next)
	}
	if len(held) != 2 || held[0].Meta != metaOf(9) || held[1].Meta != metaOf(10) {
		t.Fatalf("before the reset the stream held %+v, want frames 9 and 10 with their metadata", held)
	}
	submitMeta(t, p, 11, 12, -1)
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	stages := checkMeta(t, sink.outs, 0, 12)
	if len(stages["decode"]) != 1 || stages["decode"][0] != 2 || len(stages["none"]) != 2 || stages["none"][0] != 9 || len(stages["result"]) != 9 {
		t.Fatalf("outputs by stage %v: want frame 2 undecodable, 9 and 10 without a result, the rest with one", stages)
	}
	if s := p.Stats(); s.Submitted != 12 || s.Delivered != 9 || s.Failed != 1 || s.NoResult != 2 || s.Waiting != 0 {
		t.Fatalf("stats %+v", s)
	}

	// resumed at the checkpoint: frames 6 and 7 come back with their
	// metadata, from the saved cut, with frame 8
	cfg := engine.DefaultConfig()
	cfg.ImageWidth, cfg.ScaleFrames, cfg.SlidingWindow, cfg.Threads = 70, 3, 4, 1
	st, err := engine.Resume(ctx, cfg, func(c engine.Config) (backend.Backend, error) {
		return cpu.New(cpu.Config{Threads: c.Threads}), nil
	}, bytes.NewReader(saved), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	resumed := &metaSink{}
	p2, err := New(ctx, st, Sink[frameMeta](resumed), Config[frameMeta]{Policy: Block, Held: sink.cuts[0].Held})
	if err != nil {
		t.Fatal(err)
	}
	submitMeta(t, p2, 8, 9, -1)
	if err := p2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	stages = checkMeta(t, resumed.outs, 6, 9)
	if len(stages["result"]) != 3 {
		t.Fatalf("resumed outputs by stage %v: want three results", stages)
	}
	for k, o := range resumed.outs {
		if want := sink.outs[6+k].Result; o.Result.Kind != want.Kind || o.Result.PoseEnc != want.PoseEnc {
			t.Fatalf("resumed frame %d differs from the uninterrupted run's", o.Seq)
		}
	}
}
