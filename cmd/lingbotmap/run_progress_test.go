package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine/output"
	"github.com/lingbotmap/lingbotmap/internal/syncbuf"
)

// TestProgressFollowsMappedFrames: phase 1 delivers its 8 scale frames in
// one burst after 25 s, then a frame a second is mapped: the rate is
// measured from the end of the burst (1 frame/s, not thousands nor 8/25),
// the ETA follows it, and neither is shown before it can be measured.
func TestProgressFollowsMappedFrames(t *testing.T) {
	t0 := time.Unix(1000, 0)
	now := t0
	var logs bytes.Buffer
	p := &logProgress{log: slog.New(slog.NewTextHandler(&logs, nil)), m: rateMeter{total: 100}, what: "mapping", every: 5 * time.Second,
		now: func() time.Time { return now }}
	p.phase("phase 1: reading the 8 scale frames, which the model takes together")
	now = now.Add(25 * time.Second)
	for range 8 {
		p.add(1)
		now = now.Add(time.Millisecond)
		if r := p.m.rate(now); r != 0 {
			t.Fatalf("a rate (%g) during the burst", r)
		}
	}
	for range 10 {
		now = now.Add(time.Second)
		p.add(1)
	}
	if r := p.m.rate(now); r < 0.99 || r > 1.01 {
		t.Fatalf("rate %g frames/s after the burst, want 1", r)
	}
	if eta := p.m.eta(now); eta < 81*time.Second || eta > 83*time.Second {
		t.Errorf("ETA %v for 82 frames left at 1 frame/s", eta)
	}
	out := logs.String()
	for _, want := range []string{`msg="phase 1: reading the 8 scale frames`, "frames_mapped=18 of=100 frames_per_s=1.00 eta=1m22s"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
	if s := p.m.status("mapping", now); !strings.Contains(s, "18 of 100 frames mapped, 1.00 frames/s, about 1m22s left") {
		t.Errorf("status line %q", s)
	}
}

// TestRunSaysWhatItDoes: a run logs each thing it waits on: loading the
// model, phase 1's reading and its model call, mapping, the flush and the
// saving of the outputs, in that order.
func TestRunSaysWhatItDoes(t *testing.T) {
	fs := &fakeStream{scale: 3}
	o := testRunOptions(t, fs)
	o.cfg.ScaleFrames = 3
	var logs syncbuf.Buffer
	o.stderr = &logs
	if err := runRun(context.Background(), o, false); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	at := 0
	for _, want := range []string{"loading the model", "phase 1: reading the 3 scale frames", "phase 1: the model runs on the 3 scale frames together",
		`msg=mapping`, "flushing: the model's last frames", "saving map.ply, preview.png, the grid and run.json"} {
		i := strings.Index(out[at:], want)
		if i < 0 {
			t.Fatalf("after byte %d the log lacks %q:\n%s", at, want, out)
		}
		at += i
	}
}

// TestRunInterruptSpeaks: a signal is answered at once with what the run
// is doing, and its last message says how to go on: without --session, or
// before the first session save, that it cannot be resumed
// (TestRunInterruptSaysResume covers the --resume command).
func TestRunInterruptSpeaks(t *testing.T) {
	for _, session := range []bool{false, true} {
		fs := &fakeStream{scale: 3}
		o := testRunOptions(t, fs)
		o.cfg.ScaleFrames = 3
		o.saveSessions = session
		var logs syncbuf.Buffer
		o.stderr = &logs
		ctx, cancel := context.WithCancelCause(context.Background())
		stopped := make(chan struct{})
		fs.onPush = func(n int) error {
			if n == 5 { // after phase 1's results
				cancel(errors.New("interrupt signal received"))
				// the answer comes before the model's step ends
				waitLog(t, &logs, "stopping: the model ends its current step")
				close(stopped)
			}
			return nil
		}
		err := runRun(ctx, o, false)
		<-stopped
		want := "this run saved no session, so it cannot be resumed"
		if session {
			want = "it stopped before its first session save"
		}
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "interrupted after") {
			t.Errorf("session %v: the run ended with %v, want it to say %q", session, err, want)
		}
	}
}

// waitLog waits until the log holds s (the watcher writes it on its own
// goroutine).
func waitLog(t *testing.T, logs *syncbuf.Buffer, s string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log:\n%s", s, logs.String())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRunInterruptSaysResume: a run with --session interrupted after a
// session save ends with the --resume command for its folder, and that
// command continues it.
func TestRunInterruptSaysResume(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	ctx, cancel := context.WithCancelCause(context.Background())
	var runErr error
	cmd := newRunCmdWith(func(_ context.Context, o *runOptions, autoKF bool) error {
		o.onCheckpoint = func(_ context.Context, cp output.Checkpoint) error {
			if !cp.Final {
				cancel(errors.New("interrupt signal received"))
			}
			return nil
		}
		runErr = runRun(ctx, o, autoKF)
		return nil
	})
	cmd.SetArgs(append(goldenRunArgs(t, out)[1:], "--session", "--checkpoint-every", "4"))
	cmd.SetErr(io.Discard)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	want := "continue it with: lingbotmap run --resume " + out
	if runErr == nil || !strings.Contains(runErr.Error(), want) {
		t.Fatalf("the interrupted run ended with %v, want %q", runErr, want)
	}
	if code, msg := runCLI(t, "run", "--resume", out, "--quiet"); code != exitOK {
		t.Fatalf("the command it named: exit %d: %s", code, msg)
	}
}

// TestRunInterruptedBeforeAnyResultLeavesNothing: a run stopped in phase 1,
// before any frame was mapped, removes what it had started (run.json, the
// empty trajectory, depth/), so the same command runs again without
// --force.
func TestRunInterruptedBeforeAnyResultLeavesNothing(t *testing.T) {
	fs := &fakeStream{scale: 3}
	o := testRunOptions(t, fs)
	o.cfg.ScaleFrames = 3
	var logs syncbuf.Buffer
	o.stderr = &logs
	ctx, cancel := context.WithCancelCause(context.Background())
	fs.onPush = func(n int) error {
		if n == 2 { // inside phase 1
			cancel(errors.New("interrupt signal received"))
			waitLog(t, &logs, "stopping: the model ends its current step")
		}
		return nil
	}
	err := runRun(ctx, o, false)
	if err == nil || !strings.Contains(err.Error(), "interrupted before any frame was mapped; nothing was left in") {
		t.Fatalf("the run ended with %v", err)
	}
	if files := folderBytes(t, o.out); len(files) != 0 {
		t.Fatalf("the run that mapped nothing left %v", files)
	}
	again := &fakeStream{scale: 3}
	o2 := testRunOptions(t, again)
	o2.out, o2.cfg.ScaleFrames = o.out, 3
	if err := runRun(context.Background(), o2, false); err != nil {
		t.Fatalf("the same run again, without --force: %v", err)
	}
}
