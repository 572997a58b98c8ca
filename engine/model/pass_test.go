package model

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// TestPassEqualsForward: calls run as passes, step by step, with a fork's
// whole calls between the steps, give bit-identical outputs to Forward; the
// cost left falls by each step's cost to zero; a model with an open pass
// refuses other calls.
func TestPassEqualsForward(t *testing.T) {
	gc := loadCase(t, "stream_kf1")
	ctx := context.Background()
	calls := []struct {
		imgs [][]float32
		step Step
	}{
		{gc.images[:3], Step{}},
		{gc.images[3:4], Step{}},
		{gc.images[4:5], Step{SkipAppend: true}},
		{gc.images[5:6], Step{}},
	}
	alone := loadTiny(t, gc.m, false)
	var want []*Output
	for _, c := range calls {
		out, err := alone.Forward(ctx, c.imgs, gc.h, gc.w, c.step)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, out)
	}

	m := loadTiny(t, gc.m, false)
	other, err := m.Fork()
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	otherFrame := 0
	for ci, c := range calls {
		p, err := m.Begin(ctx, c.imgs, gc.h, gc.w, c.step)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Forward(ctx, c.imgs, gc.h, gc.w, c.step); !errors.Is(err, ErrBusy) {
			t.Fatalf("Forward during a pass: %v, want ErrBusy", err)
		}
		total := p.Cost()
		if total != m.CallCost(len(c.imgs)) {
			t.Fatalf("call %d: a new pass costs %d, CallCost says %d", ci, total, m.CallCost(len(c.imgs)))
		}
		steps := 0
		for {
			before, next := p.Cost(), p.NextCost()
			if costs := p.StepCosts(nil); costs[0] != next || sum(costs) != before {
				t.Fatalf("call %d step %d: steps left %v, next costs %d, %d left", ci, steps, costs, next, before)
			}
			done, err := p.Step()
			if err != nil {
				t.Fatal(err)
			}
			steps++
			if p.Cost() != before-next {
				t.Fatalf("call %d step %d: cost %d → %d, the step costs %d", ci, steps, before, p.Cost(), next)
			}
			if done {
				break
			}
			if p.Output() != nil {
				t.Fatal("output before the pass is done")
			}
			// the other state streams its own frames between the steps
			imgs := gc.images[otherFrame%16 : otherFrame%16+1]
			if otherFrame == 0 {
				imgs = gc.images[:3]
			}
			if _, err := other.Forward(ctx, imgs, gc.h, gc.w, Step{SkipAppend: otherFrame > 6}); err != nil {
				t.Fatal(err)
			}
			otherFrame++
		}
		if p.Cost() != 0 {
			t.Fatalf("call %d: cost %d left when done", ci, p.Cost())
		}
		if wantSteps := len(m.dino.blocks) + m.agg.depth() + 2; steps != wantSteps {
			t.Fatalf("call %d: %d steps, want %d", ci, steps, wantSteps)
		}
		got, w := p.Output(), want[ci]
		if !slices.Equal(got.PoseEnc, w.PoseEnc) {
			t.Fatalf("call %d: pose %v, Forward %v", ci, got.PoseEnc, w.PoseEnc)
		}
		for f := range w.Depth {
			if !slices.Equal(got.Depth[f], w.Depth[f]) || !slices.Equal(got.DepthConf[f], w.DepthConf[f]) || !slices.Equal(got.Points[f], w.Points[f]) {
				t.Fatalf("call %d frame %d: dense outputs differ from Forward's", ci, f)
			}
		}
	}
	if m.Stats() != alone.Stats() || m.CameraFrames() != alone.CameraFrames() {
		t.Fatalf("after the passes: %+v (camera %d), Forward alone %+v (camera %d)", m.Stats(), m.CameraFrames(), alone.Stats(), alone.CameraFrames())
	}
}

// TestPassAbortAndCancel: an aborted or cancelled pass of a frame that is
// not committed yet gives its pages back (a keyframe's eviction runs when it
// is appended, so as after a failed Forward only a Reset undoes it) and the
// model takes the same call again with the same result.
func TestPassAbortAndCancel(t *testing.T) {
	gc := loadCase(t, "stream_kf1")
	m := loadTiny(t, gc.m, false)
	ctx := context.Background()
	if _, err := m.Forward(ctx, gc.images[:3], gc.h, gc.w, Step{}); err != nil {
		t.Fatal(err)
	}
	before, cam := m.Stats(), m.CameraFrames()
	for _, step := range []Step{{SkipAppend: true}, {DeferEviction: true}} {
		p, err := m.Begin(ctx, gc.images[3:4], gc.h, gc.w, step)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			if _, err := p.Step(); err != nil {
				t.Fatal(err)
			}
		}
		p.Abort()
		if _, err := p.Step(); err == nil {
			t.Fatal("an aborted pass stepped on")
		}
		if m.Stats() != before || m.CameraFrames() != cam {
			t.Fatalf("%+v: after Abort %+v, before the call %+v", step, m.Stats(), before)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	p, err := m.Begin(cctx, gc.images[3:4], gc.h, gc.w, Step{SkipAppend: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Step(); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := p.Step(); !errors.Is(err, context.Canceled) {
		t.Fatalf("step after cancel: %v", err)
	}
	if m.Stats() != before {
		t.Fatalf("after a cancelled pass %+v, before %+v", m.Stats(), before)
	}
	a, err := m.Forward(ctx, gc.images[3:4], gc.h, gc.w, Step{})
	if err != nil {
		t.Fatal(err)
	}
	ref := loadTiny(t, gc.m, false)
	if _, err := ref.Forward(ctx, gc.images[:3], gc.h, gc.w, Step{}); err != nil {
		t.Fatal(err)
	}
	b, err := ref.Forward(ctx, gc.images[3:4], gc.h, gc.w, Step{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.PoseEnc, b.PoseEnc) {
		t.Fatalf("after aborted passes the frame gives %v, a fresh model %v", a.PoseEnc, b.PoseEnc)
	}
}

// TestEncodedPhase1EqualsForward: phase 1 on frames encoded one at a time
// ahead of the call, with its dense heads run one frame per step (as a live
// window's warm-up does), gives Forward's outputs bit for bit on the CPU (the
// encoder and the heads work on each frame alone), no step costs more than a
// frame's heads or an aggregator block pair over the frames, and the
// encodings are consumed.
func TestEncodedPhase1EqualsForward(t *testing.T) {
	gc := loadCase(t, "stream_kf1")
	ctx := context.Background()
	alone := loadTiny(t, gc.m, false)
	want, err := alone.Forward(ctx, gc.images[:3], gc.h, gc.w, Step{})
	if err != nil {
		t.Fatal(err)
	}
	m := loadTiny(t, gc.m, false)
	var encs []*Encoding
	for f := 0; f < 3; f++ {
		p, err := m.Encode(ctx, gc.images[f], gc.h, gc.w)
		if err != nil {
			t.Fatal(err)
		}
		steps := 0
		for {
			if steps == 0 && !slices.Equal(p.StepCosts(nil), m.EncodeStepCosts(nil)) {
				t.Fatalf("frame %d: steps %v, before the encoding %v", f, p.StepCosts(nil), m.EncodeStepCosts(nil))
			}
			if costs := p.StepCosts(nil); len(costs) != m.EncodeCost()-steps || sum(costs) != p.Cost() {
				t.Fatalf("frame %d: steps left %v after %d steps, %d left", f, costs, steps, p.Cost())
			}
			if p.Cost() != m.EncodeCost()-steps {
				t.Fatalf("frame %d: cost %d after %d steps, want %d", f, p.Cost(), steps, m.EncodeCost()-steps)
			}
			done, err := p.Step()
			if err != nil {
				t.Fatal(err)
			}
			steps++
			if done {
				break
			}
		}
		encs = append(encs, p.Encoding())
	}
	p, err := m.BeginEncoded(ctx, encs, Step{FrameHeads: true})
	if err != nil {
		t.Fatal(err)
	}
	if p.Cost() != m.CallCost(3)-3*m.EncodeCost() {
		t.Fatalf("an encoded phase 1 costs %d, want %d", p.Cost(), m.CallCost(3)-3*m.EncodeCost())
	}
	if got, want := p.StepCosts(nil), m.EncodedStepCosts(nil, 3, Step{FrameHeads: true}); !slices.Equal(got, want) {
		t.Fatalf("step costs %v, before the call %v", got, want)
	}
	headSteps := 0
	for {
		before, next := p.Cost(), p.NextCost()
		if costs := p.StepCosts(nil); costs[0] != next || sum(costs) != before {
			t.Fatalf("steps left %v, next costs %d, %d left", costs, next, before)
		}
		if next > max(2*3, costHeadsPerFrame) {
			t.Fatalf("a step of cost %d (%d left)", next, before)
		}
		if p.stage == stageHeads {
			headSteps++
		}
		done, err := p.Step()
		if p.Cost() != before-next {
			t.Fatalf("cost %d → %d, the step costs %d", before, p.Cost(), next)
		}
		if err != nil {
			t.Fatal(err)
		}
		if done {
			break
		}
	}
	if headSteps != 3 {
		t.Fatalf("the heads ran in %d steps for 3 frames", headSteps)
	}
	got := p.Output()
	if !slices.Equal(got.PoseEnc, want.PoseEnc) {
		t.Fatalf("encoded phase 1 poses %v, Forward %v", got.PoseEnc, want.PoseEnc)
	}
	for f := range want.Depth {
		if !slices.Equal(got.Depth[f], want.Depth[f]) || !slices.Equal(got.DepthConf[f], want.DepthConf[f]) ||
			!slices.Equal(got.Points[f], want.Points[f]) || !slices.Equal(got.PointsConf[f], want.PointsConf[f]) {
			t.Fatalf("frame %d: dense outputs differ from Forward's", f)
		}
	}
	if m.Stats() != alone.Stats() {
		t.Fatalf("cache %+v, Forward's %+v", m.Stats(), alone.Stats())
	}
	// the call took the encodings
	m.Reset()
	if _, err := m.BeginEncoded(ctx, encs, Step{}); err == nil {
		t.Fatal("BeginEncoded took freed encodings")
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// TestPassDeferFetch: a pass with Step.DeferFetch stops once its work and
// its copies are queued (Queued), leaves the model, which runs the next
// call at once, and completes with the step after, its output and the next
// call's bit-identical to Forward's one after the other; its cost then is
// zero, a cancelled context does not cut the wait short, and an aborted
// queued pass (its frame committed, as a call's whose outputs go unread)
// leaves the model's next call undisturbed.
func TestPassDeferFetch(t *testing.T) {
	gc := loadCase(t, "stream_kf1")
	ctx := context.Background()
	alone := loadTiny(t, gc.m, false)
	want := streamOutputs(t, alone, gc)
	same := func(name string, got, w *Output) {
		t.Helper()
		if !slices.Equal(got.PoseEnc, w.PoseEnc) {
			t.Fatalf("%s: pose %v, Forward %v", name, got.PoseEnc, w.PoseEnc)
		}
		for f := range w.Depth {
			if !slices.Equal(got.Depth[f], w.Depth[f]) || !slices.Equal(got.DepthConf[f], w.DepthConf[f]) || !slices.Equal(got.Points[f], w.Points[f]) {
				t.Fatalf("%s frame %d: dense outputs differ from Forward's", name, f)
			}
		}
	}
	m := loadTiny(t, gc.m, false)
	if _, err := m.Forward(ctx, gc.images[:3], gc.h, gc.w, Step{}); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	p, err := m.Begin(cctx, gc.images[3:4], gc.h, gc.w, Step{DeferFetch: true})
	if err != nil {
		t.Fatal(err)
	}
	stepUntil(t, p, "the copies", p.Queued)
	if p.Output() != nil || p.Cost() != 0 || len(p.StepCosts(nil)) != 1 {
		t.Fatalf("queued pass: output %v, cost %d, steps %v", p.Output() != nil, p.Cost(), p.StepCosts(nil))
	}
	cancel()
	// the next frame runs while the first one's copies are in flight
	next, err := m.Forward(ctx, gc.images[4:5], gc.h, gc.w, Step{})
	if err != nil {
		t.Fatalf("a call after a queued pass: %v", err)
	}
	done, err := p.Step()
	if err != nil || !done || p.Queued() {
		t.Fatalf("the wait: done %v, queued %v, %v", done, p.Queued(), err)
	}
	same("queued call", p.Output(), want[1])
	same("the call after it", next, want[2])

	// an aborted queued pass: the model's next call is as Forward's
	q, err := m.Begin(ctx, gc.images[5:6], gc.h, gc.w, Step{DeferFetch: true})
	if err != nil {
		t.Fatal(err)
	}
	stepUntil(t, q, "the aborted pass's copies", q.Queued)
	q.Abort()
	if _, err := q.Step(); err == nil || q.Output() != nil {
		t.Fatalf("an aborted queued pass stepped on: %v", err)
	}
	// its frame was committed when it was queued, as a call's whose
	// outputs went unread
	if m.Stats() != alone.Stats() || m.CameraFrames() != alone.CameraFrames() {
		t.Fatalf("after the aborted queued pass: %+v (camera %d), Forward alone %+v (camera %d)", m.Stats(), m.CameraFrames(), alone.Stats(), alone.CameraFrames())
	}
	w, err := alone.Forward(ctx, gc.images[6:7], gc.h, gc.w, Step{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Forward(ctx, gc.images[6:7], gc.h, gc.w, Step{})
	if err != nil {
		t.Fatalf("a call after an aborted queued pass: %v", err)
	}
	same("the call after an aborted queued pass", got, w)
}
