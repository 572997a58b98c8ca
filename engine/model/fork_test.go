package model

import (
	"context"
	"slices"
	"testing"
)

// TestForkIsASecondState: a fork's calls interleaved with the model's leave
// both bit-identical to each running alone; each has its own KV cache,
// camera cache and frame counter, and closing the fork leaves the model
// running.
func TestForkIsASecondState(t *testing.T) {
	gc := loadCase(t, "stream_kf1")
	ctx := context.Background()
	step := func(m *Model, i int) [][9]float32 {
		t.Helper()
		imgs := gc.images[i : i+1]
		if i == 0 {
			imgs = gc.images[:3]
		}
		out, err := m.Forward(ctx, imgs, gc.h, gc.w, Step{SkipAppend: i == 4})
		if err != nil {
			t.Fatal(err)
		}
		return out.PoseEnc
	}
	frames := []int{0, 3, 4, 5, 6, 7}
	alone := loadTiny(t, gc.m, false)
	var want [][9]float32
	for _, i := range frames {
		want = append(want, step(alone, i)...)
	}
	wantStats, wantCam := alone.Stats(), alone.CameraFrames()

	base := loadTiny(t, gc.m, false)
	fork, err := base.Fork()
	if err != nil {
		t.Fatal(err)
	}
	// the fork runs two frames behind the model
	var got, gotFork [][9]float32
	for k := 0; k < len(frames)+2; k++ {
		if k < len(frames) {
			got = append(got, step(base, frames[k])...)
		}
		if k >= 2 {
			gotFork = append(gotFork, step(fork, frames[k-2])...)
		}
		if k == 2 && (fork.Stats().FrameCount != 3 || base.Stats().FrameCount != 4) {
			t.Fatalf("after 3 calls of the model and 1 of the fork: %d and %d frames cached, want 4 (frame 4 skips the cache) and 3", base.Stats().FrameCount, fork.Stats().FrameCount)
		}
	}
	if !slices.Equal(got, want) || !slices.Equal(gotFork, want) {
		t.Fatalf("interleaved states differ from a model alone:\nalone %v\nmodel %v\nfork  %v", want, got, gotFork)
	}
	for _, m := range []*Model{base, fork} {
		if m.Stats() != wantStats || m.CameraFrames() != wantCam {
			t.Fatalf("stats %+v camera %d, alone %+v camera %d", m.Stats(), m.CameraFrames(), wantStats, wantCam)
		}
	}
	fork.Close()
	base.Reset()
	var again [][9]float32
	for _, i := range frames {
		again = append(again, step(base, i)...)
	}
	if !slices.Equal(again, want) {
		t.Fatalf("after the fork closed the model replays %v, want %v", again, want)
	}
	if _, err := fork.Forward(ctx, gc.images[:1], gc.h, gc.w, Step{}); err == nil {
		t.Fatal("a closed fork ran")
	}
}
