package model

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/cpu"
	"github.com/lingbotmap/lingbotmap/engine/golden/goldentest"
)

// branchProbe is the CPU backend as a backend.Brancher that records, in
// order, the branches, the merges, the attentions (only the camera head
// runs Attention once the aggregator is done) and the copies to the host.
type branchProbe struct {
	backend.Backend
	inBranch bool
	events   []string
}

func (b *branchProbe) Branch(fn func()) {
	b.events = append(b.events, "branch")
	b.inBranch = true
	fn()
	b.inBranch = false
	b.events = append(b.events, "end")
}

func (b *branchProbe) Merge() { b.events = append(b.events, "merge") }

func (b *branchProbe) Attention(q, k, v backend.Tensor, scale float32) backend.Tensor {
	if b.inBranch {
		b.events = append(b.events, "attn in branch")
	} else {
		b.events = append(b.events, "attn")
	}
	return b.Backend.Attention(q, k, v, scale)
}

func (b *branchProbe) FromHost(data []float32, shape ...int) backend.Tensor {
	if b.inBranch {
		b.events = append(b.events, "upload in branch")
	} else {
		b.events = append(b.events, "upload")
	}
	return b.Backend.FromHost(data, shape...)
}

func (b *branchProbe) ToHost(t backend.Tensor) []float32 {
	b.events = append(b.events, "host")
	return b.Backend.ToHost(t)
}

// probeModels loads the tiny model of stream_kf1 on the plain CPU backend
// and on a branchProbe.
func probeModels(t *testing.T) (gc *goldenCase, plain *Model, probe *branchProbe, m *Model) {
	t.Helper()
	gc = loadCase(t, "stream_kf1")
	plain = loadTiny(t, gc.m, false)
	probe = &branchProbe{Backend: cpu.New(cpu.Config{})}
	m, err := Load(probe, goldentest.Open(t, "weights.safetensors"), Options{
		ScaleFrames:      gc.m.Config.ScaleFrames,
		SlidingWindow:    gc.m.Config.SlidingWindow,
		MaxFrames:        gc.m.Config.MaxFrameNum,
		CameraIterations: gc.m.Config.CameraIterations,
		SelectedLayers:   gc.m.Config.SelectedIdx,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return gc, plain, probe, m
}

// TestCameraHeadRunsAsABranch: a Brancher backend gets the camera head,
// and only it, as a branch, and a merge before any copy to the host reads
// what the branch made; the outputs are those of the plain CPU backend.
func TestCameraHeadRunsAsABranch(t *testing.T) {
	gc, plain, probe, m := probeModels(t)
	ctx := context.Background()
	for i, c := range []struct {
		imgs [][]float32
		step Step
	}{
		{gc.images[:3], Step{}},
		{gc.images[3:4], Step{}},
		{gc.images[4:5], Step{SkipAppend: true}},
		{gc.images[5:6], Step{DeferFetch: true}},
	} {
		want, err := plain.Forward(ctx, c.imgs, gc.h, gc.w, c.step)
		if err != nil {
			t.Fatal(err)
		}
		probe.events = probe.events[:0]
		got, err := m.Forward(ctx, c.imgs, gc.h, gc.w, c.step)
		if err != nil {
			t.Fatal(err)
		}
		ev := probe.events
		what := fmt.Sprintf("call %d (%v)", i, ev)
		b, end := oneBranch(t, what, ev)
		if !slices.Contains(ev[b:end], "attn in branch") {
			t.Errorf("%s: the camera head's attention is not inside the branch", what)
		}
		if !samePlain(got, want) {
			t.Errorf("%s: outputs differ from the plain CPU backend's", what)
		}
	}
}

// samePlain says whether got has want's pose encoding, depth and depth
// confidence (want: the plain CPU backend's) bit for bit.
func samePlain(got, want *Output) bool {
	return slices.Equal(flat(got.PoseEnc), flat(want.PoseEnc)) && slices.Equal(got.Depth[0], want.Depth[0]) &&
		slices.Equal(got.DepthConf[0], want.DepthConf[0])
}

// oneBranch checks a call's probe events: exactly one branch, no attention
// after it ends, and a merge after it before any copy to the host; it
// returns where the branch begins and ends.
func oneBranch(t *testing.T, what string, ev []string) (b, end int) {
	t.Helper()
	b = slices.Index(ev, "branch")
	if b < 0 || slices.Index(ev[b+1:], "branch") >= 0 {
		t.Fatalf("%s: want one branch", what)
	}
	end = b + 1 + slices.Index(ev[b+1:], "end")
	if slices.Contains(ev[end:], "attn") {
		t.Errorf("%s: attention after the branch ended", what)
	}
	mg := slices.Index(ev[end:], "merge")
	if mg < 0 {
		t.Fatalf("%s: no merge after the branch", what)
	}
	if h := slices.Index(ev[end:], "host"); h >= 0 && h < mg {
		t.Errorf("%s: a copy to the host before the merge", what)
	}
	return b, end
}

func flat(p [][poseDim]float32) []float32 {
	var out []float32
	for _, r := range p {
		out = append(out, r[:]...)
	}
	return out
}

// TestHeadsBesideRunsTheEncoderInTheBranch: a pass paused before its heads
// (Step.PauseAtHeads) reports Paused, with its camera head's frame counted
// already; HeadsBeside uploads the next frame's image outside the branch,
// runs the camera head and every DINO block of the next frame inside it
// and the dense heads after it, with a merge before any copy to the host;
// both frames' outputs, the paused one's and the one begun from the
// encoding (BeginEncoded), are those of the plain CPU backend's calls.
func TestHeadsBesideRunsTheEncoderInTheBranch(t *testing.T) {
	gc, plain, probe, m := probeModels(t)
	ctx := context.Background()
	want := streamOutputs(t, plain, gc)
	if _, err := m.Forward(ctx, gc.images[:3], gc.h, gc.w, Step{}); err != nil {
		t.Fatal(err)
	}
	same := func(what string, got, want *Output) {
		t.Helper()
		if !samePlain(got, want) {
			t.Errorf("%s: outputs differ from the plain CPU backend's", what)
		}
	}
	// frame 3 pauses; frame 4 is encoded beside its heads, pauses in turn,
	// and frame 5 is encoded beside those
	p, err := m.Begin(ctx, gc.images[3:4], gc.h, gc.w, Step{PauseAtHeads: true, DeferFetch: true})
	if err != nil {
		t.Fatal(err)
	}
	for f := 3; f <= 4; f++ {
		stepUntil(t, p, fmt.Sprintf("frame %d, the pause", f), p.Paused)
		if got, want := m.CameraFrames(), f+1; got != want {
			t.Errorf("frame %d paused: %d camera frames, want %d (counted as if its heads had run)", f, got, want)
		}
		enc, err := m.Encode(ctx, gc.images[f+1], gc.h, gc.w)
		if err != nil {
			t.Fatal(err)
		}
		probe.events = probe.events[:0]
		if err := p.HeadsBeside(enc); err != nil {
			t.Fatal(err)
		}
		if !p.Queued() || enc.Encoding() == nil {
			t.Fatalf("frame %d: queued %v, encoding %v after HeadsBeside", f, p.Queued(), enc.Encoding() != nil)
		}
		ev := probe.events
		what := fmt.Sprintf("frame %d (%v)", f, ev)
		b, end := oneBranch(t, what, ev)
		if up := slices.Index(ev, "upload"); up < 0 || up > b || slices.Contains(ev, "upload in branch") {
			t.Errorf("%s: the next frame's image is not uploaded before the branch", what)
		}
		// one attention a camera head block and iteration, one a DINO block
		cam := len(m.cam.k) * len(m.camera.trunk)
		if n := strings.Count(strings.Join(ev[b:end], ","), "attn in branch"); n != cam+len(m.dino.blocks) {
			t.Errorf("%s: %d attentions in the branch, want the camera head's %d and %d DINO blocks'", what, n, cam, len(m.dino.blocks))
		}
		if done, err := p.Step(); err != nil || !done {
			t.Fatalf("frame %d: done %v, err %v after its copies", f, done, err)
		}
		same(fmt.Sprintf("frame %d", f), p.Output(), want[f-2])
		step := Step{PauseAtHeads: true, DeferFetch: true}
		if f == 4 {
			step = Step{}
		}
		if p, err = m.BeginEncoded(ctx, []*Encoding{enc.Encoding()}, step); err != nil {
			t.Fatal(err)
		}
	}
	stepToEnd(t, p)
	same("frame 5", p.Output(), want[3])
}

// TestHeadsBesideCancelledEncoding: an encoding whose context is cancelled
// fails alone: HeadsBeside returns its error, the paused pass stays paused
// and its own steps complete it with the plain backend's outputs.
func TestHeadsBesideCancelledEncoding(t *testing.T) {
	gc, plain, _, m := probeModels(t)
	ctx := context.Background()
	want := streamOutputs(t, plain, gc)[1]
	if _, err := m.Forward(ctx, gc.images[:3], gc.h, gc.w, Step{}); err != nil {
		t.Fatal(err)
	}
	p, err := m.Begin(ctx, gc.images[3:4], gc.h, gc.w, Step{PauseAtHeads: true})
	if err != nil {
		t.Fatal(err)
	}
	stepUntil(t, p, "the pause", p.Paused)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	enc, err := m.Encode(cancelled, gc.images[4], gc.h, gc.w)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.HeadsBeside(enc); !errors.Is(err, context.Canceled) || enc.Encoding() != nil {
		t.Fatalf("HeadsBeside with a cancelled encoding: %v, encoding %v", err, enc.Encoding() != nil)
	}
	if !p.Paused() {
		t.Fatal("the pass is no longer paused after its neighbour's failure")
	}
	stepToEnd(t, p)
	if !samePlain(p.Output(), want) {
		t.Error("the paused pass's outputs differ from the plain CPU backend's")
	}
}

// stepUntil steps p until reached says so; it fails on an error, or on p
// completing first.
func stepUntil(t *testing.T, p *Pass, what string, reached func() bool) {
	t.Helper()
	for !reached() {
		if done, err := p.Step(); err != nil || done {
			t.Fatalf("%s: done %v, err %v before it", what, done, err)
		}
	}
}

// stepToEnd steps p until it is done; it fails on an error or a pause (the
// passes it is given have no pause left).
func stepToEnd(t *testing.T, p *Pass) {
	t.Helper()
	for {
		done, err := p.Step()
		if err != nil {
			t.Fatal(err)
		}
		if done {
			return
		}
		if p.Paused() {
			t.Fatal("a pass paused with no pause left")
		}
	}
}
