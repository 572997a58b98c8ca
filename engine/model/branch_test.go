package model

import (
	"context"
	"fmt"
	"slices"
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

func (b *branchProbe) ToHost(t backend.Tensor) []float32 {
	b.events = append(b.events, "host")
	return b.Backend.ToHost(t)
}

// TestCameraHeadRunsAsABranch: a Brancher backend gets the camera head,
// and only it, as a branch, and a merge before any copy to the host reads
// what the branch made; the outputs are those of the plain CPU backend.
func TestCameraHeadRunsAsABranch(t *testing.T) {
	gc := loadCase(t, "stream_kf1")
	ctx := context.Background()
	plain := loadTiny(t, gc.m, false)
	probe := &branchProbe{Backend: cpu.New(cpu.Config{})}
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
	defer m.Close()
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
		b := slices.Index(ev, "branch")
		if b < 0 || slices.Index(ev[b+1:], "branch") >= 0 {
			t.Fatalf("%s: want one branch", what)
		}
		end := b + 1 + slices.Index(ev[b+1:], "end")
		if !slices.Contains(ev[b:end], "attn in branch") {
			t.Errorf("%s: the camera head's attention is not inside the branch", what)
		}
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
		if !slices.Equal(flat(got.PoseEnc), flat(want.PoseEnc)) || !slices.Equal(got.Depth[0], want.Depth[0]) {
			t.Errorf("%s: outputs differ from the plain CPU backend's", what)
		}
	}
}

func flat(p [][poseDim]float32) []float32 {
	var out []float32
	for _, r := range p {
		out = append(out, r[:]...)
	}
	return out
}
