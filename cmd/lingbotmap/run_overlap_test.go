package main

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run with overlap_frames writes the very files run writes without, and
// saves its session at every checkpoint (the pipeline hands the frame the
// engine holds out before the engine state is saved).
func TestRunOverlapFramesSameFiles(t *testing.T) {
	files := func(overlap bool) map[string][]byte {
		o := testRunOptions(t, nil)
		o.src.FirstK = 12
		o.newStream = newEngineStream
		o.cfg.ImageWidth, o.cfg.ScaleFrames, o.cfg.SlidingWindow = 70, 3, 4
		o.cfg.OverlapFrames = overlap
		o.saveConf = true
		o.saveSessions, o.checkpointEvery, o.session.every = true, 4, 4
		if err := runRun(context.Background(), o, true); err != nil {
			t.Fatalf("overlap_frames %v: %v", overlap, err)
		}
		out := map[string][]byte{}
		err := filepath.WalkDir(o.out, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(o.out, path)
			if rel == "run.json" || strings.HasPrefix(rel, ".") {
				return nil // timings and the lock's process id
			}
			b, err := os.ReadFile(path)
			out[rel] = b
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := out[filepath.Join("session", "run.state")]; !ok {
			t.Fatalf("overlap_frames %v: no session saved (files %d)", overlap, len(out))
		}
		return out
	}
	want, got := files(false), files(true)
	if len(got) != len(want) {
		t.Fatalf("%d files with overlap_frames, %d without", len(got), len(want))
	}
	for name, w := range want {
		if name == filepath.Join("session", "run.state") {
			continue // it records the settings, overlap_frames among them
		}
		if g, ok := got[name]; !ok || !bytes.Equal(g, w) {
			t.Fatalf("%s differs with overlap_frames (present %v)", name, ok)
		}
	}
}
