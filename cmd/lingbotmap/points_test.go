package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/geom"
)

// keptStream is an engine that makes points ahead, as a GPU stream does
// (engine.PointMaker): told a filter, it gives every result the host's
// points for it in Result.Kept. It records what it was told.
type keptStream struct {
	engine.Stream
	told          []geom.PointFilter
	keyframesOnly bool
}

func (k *keptStream) MakePoints(filt geom.PointFilter, keyframesOnly bool) (bool, error) {
	k.told = append(k.told, filt)
	k.keyframesOnly = keyframesOnly
	return true, nil
}

func (k *keptStream) kept(res []engine.Result, err error) ([]engine.Result, error) {
	for i := range res {
		if len(k.told) == 0 || err != nil {
			break
		}
		r := &res[i]
		if r.Kept, err = geom.Keep(r.DepthFrame(), k.told[len(k.told)-1]); err != nil {
			return nil, err
		}
	}
	return res, err
}

func (k *keptStream) Push(ctx context.Context, f engine.Frame) ([]engine.Result, error) {
	return k.kept(k.Stream.Push(ctx, f))
}

func (k *keptStream) Flush(ctx context.Context) ([]engine.Result, error) {
	return k.kept(k.Stream.Flush(ctx))
}

// run tells the engine its map filter once, for every frame, maps the
// points the engine made ahead, and writes the same map as from points it
// unprojects itself (the CPU backend's fallback); run.json counts which.
func TestRunUsesEnginePoints(t *testing.T) {
	const n = 8
	plain := goldenRunOptions(t, n)
	if err := runRun(context.Background(), plain, false); err != nil {
		t.Fatal(err)
	}
	ahead := goldenRunOptions(t, n)
	var ks *keptStream
	ahead.newStream = func(ctx context.Context, cfg engine.Config, log *slog.Logger) (engine.Stream, error) {
		st, err := newEngineStream(ctx, cfg, log)
		ks = &keptStream{Stream: st}
		return ks, err
	}
	if err := runRun(context.Background(), ahead, false); err != nil {
		t.Fatal(err)
	}
	if want := (geom.PointFilter{ConfThreshold: ahead.confThreshold, Stride: ahead.pixelStride}); len(ks.told) != 1 || ks.told[0] != want || ks.keyframesOnly {
		t.Fatalf("run told the engine %+v (keyframes only %v), want %+v once, every frame", ks.told, ks.keyframesOnly, want)
	}
	for _, f := range []string{"map.ply", "trajectory.tum"} {
		a, errA := os.ReadFile(filepath.Join(plain.out, f))
		b, errB := os.ReadFile(filepath.Join(ahead.out, f))
		if errA != nil || errB != nil || len(a) == 0 || !bytes.Equal(a, b) {
			t.Fatalf("%s differs with the engine's points (%v, %v)", f, errA, errB)
		}
	}
	if rec := readRunJSON(t, plain.out); rec.Map.FramesDevice != 0 || rec.Map.FramesHost != n {
		t.Fatalf("plain run.json map %+v: want %d frames from the host", rec.Map, n)
	}
	if rec := readRunJSON(t, ahead.out); rec.Map.FramesDevice != n || rec.Map.FramesHost != 0 {
		t.Fatalf("run.json map %+v: want %d frames from the engine's points", rec.Map, n)
	}
}
