package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/backend/hostpoints"
)

// queuedPoints is the CPU backend with the device points' capabilities
// (backend.AsyncUnprojector) done on the host, as a GPU backend has them:
// StartUnproject's points are made at Wait from the maps as they are then.
// It counts the points queued and the maps freed before their Wait.
type queuedPoints struct {
	backend.Backend
	queued  int
	pending map[backend.Tensor]bool
	early   int
}

func (q *queuedPoints) Unproject(depth, conf backend.Tensor, u backend.Unprojection) ([]float32, []int32, error) {
	return hostpoints.Unproject(q, depth, conf, u)
}

func (q *queuedPoints) StartUnproject(depth, conf backend.Tensor, u backend.Unprojection) backend.PendingPoints {
	q.queued++
	q.pending[depth], q.pending[conf] = true, true
	return queuedWait{q, depth, conf, u}
}

func (q *queuedPoints) Free(t backend.Tensor) {
	if q.pending[t] {
		q.early++
	}
	q.Backend.Free(t)
}

type queuedWait struct {
	q           *queuedPoints
	depth, conf backend.Tensor
	u           backend.Unprojection
}

func (w queuedWait) Wait() ([]float32, []int32, error) {
	if !w.q.pending[w.depth] || !w.q.pending[w.conf] {
		return nil, nil, errors.New("points waited for twice")
	}
	delete(w.q.pending, w.depth)
	delete(w.q.pending, w.conf)
	return w.q.Unproject(w.depth, w.conf, w.u)
}

// run with overlap_frames writes the very files run writes without, and
// saves its session at every checkpoint (the pipeline hands the frames the
// engine holds out before the engine state is saved); so too where the
// backend makes every frame's points and queues them (a GPU's way), where
// the engine holds those frames too.
func TestRunOverlapFramesSameFiles(t *testing.T) {
	for _, points := range []bool{false, true} {
		t.Run(fmt.Sprintf("device points %v", points), func(t *testing.T) { runOverlapSameFiles(t, points) })
	}
}

func runOverlapSameFiles(t *testing.T, points bool) {
	files := func(overlap bool) map[string][]byte {
		o := testRunOptions(t, nil)
		o.src.FirstK = 12
		o.newStream = newEngineStream
		var qp *queuedPoints
		if points {
			o.newStream = func(ctx context.Context, cfg engine.Config, log *slog.Logger) (engine.Stream, error) {
				return engine.New(ctx, cfg, func(c engine.Config) (backend.Backend, error) {
					be, err := backendFactory(log)(c)
					qp = &queuedPoints{Backend: be, pending: map[backend.Tensor]bool{}}
					return qp, err
				}, log)
			}
		}
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
		rec := readRunJSON(t, o.out)
		switch {
		case !points && rec.Map.FramesDevice != 0:
			t.Fatalf("%d frames with device points on the CPU backend", rec.Map.FramesDevice)
		case points && (rec.Map.FramesDevice == 0 || rec.Map.FramesHost != 0):
			t.Fatalf("overlap_frames %v: %d frames' points from the backend, %d from the host", overlap, rec.Map.FramesDevice, rec.Map.FramesHost)
		case points && overlap && qp.queued == 0:
			t.Fatal("no frame's points were queued ahead")
		case points && !overlap && qp.queued != 0:
			t.Fatalf("%d frames' points queued without overlap_frames", qp.queued)
		case points && (len(qp.pending) != 0 || qp.early != 0):
			t.Fatalf("%d maps never waited for, %d freed before their wait", len(qp.pending), qp.early)
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
