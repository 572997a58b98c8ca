package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine/traj"
	"github.com/lingbotmap/lingbotmap/internal/shared"
)

// TestMain runs the command itself when the session test re-executes this
// binary as lingbotmap (LINGBOTMAP_TEST_MAIN=1), so that the test can kill a
// real run.
func TestMain(m *testing.M) {
	if os.Getenv("LINGBOTMAP_TEST_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// lingbotmapCmd is this test binary as the lingbotmap command.
func lingbotmapCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "LINGBOTMAP_TEST_MAIN=1")
	return cmd
}

// goldenRunArgs run the golden tiny model on the courthouse frames with the
// golden cache settings and every second frame a keyframe.
func goldenRunArgs(t *testing.T, out string) []string {
	t.Helper()
	in, err := shared.Path("data", "courthouse")
	if err != nil {
		t.Fatal(err)
	}
	w, err := shared.Path("golden", "weights.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	return []string{"run", in, "--out", out, "--weights", w, "--image-width", "70", "--scale-frames", "3",
		"--sliding-window", "4", "--max-frames", "256", "--keyframe-interval", "2", "--threads", "2", "--no-progress", "--quiet"}
}

// TestRunResumeAfterKill: a run saving its session every 4 frames is killed
// with SIGKILL as soon as a session exists; `run --resume` continues it and
// the trajectory and map equal an uninterrupted run's (poses to 1e-6
// relative).
func TestRunResumeAfterKill(t *testing.T) {
	base := t.TempDir()
	full, cut := filepath.Join(base, "full"), filepath.Join(base, "cut")
	if out, err := lingbotmapCmd(t, goldenRunArgs(t, full)...).CombinedOutput(); err != nil {
		t.Fatalf("uninterrupted run: %v\n%s", err, out)
	}

	cmd := lingbotmapCmd(t, append(goldenRunArgs(t, cut), "--checkpoint-every", "4", "--session")...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(cut, "session", "run.state")
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(state); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("no session saved within a minute\n%s", logs.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("the run ended (%v) before it was killed; the test needs a longer input\n%s", err, logs.String())
	}
	if _, err := os.Stat(filepath.Join(cut, "trajectory.tum")); err == nil {
		t.Log("note: a trajectory was written before the kill")
	}

	if out, err := lingbotmapCmd(t, "run", "--resume", cut, "--no-progress").CombinedOutput(); err != nil {
		t.Fatalf("resumed run: %v\n%s", err, out)
	} else if !strings.Contains(string(out), "resumed") {
		t.Fatalf("the run did not say it resumed:\n%s", out)
	}
	want, err := traj.ReadTUMFile(filepath.Join(full, "trajectory.tum"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := traj.ReadTUMFile(filepath.Join(cut, "trajectory.tum"))
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 24 || len(got) != len(want) {
		t.Fatalf("resumed trajectory has %d poses, uninterrupted %d (of 24 frames)", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		bad := g.Time != w.Time
		for a := 0; a < 3; a++ {
			bad = bad || math.Abs(g.T[a]-w.T[a]) > 1e-6*math.Max(math.Abs(w.T[a]), 1e-3)
			for b := 0; b < 3; b++ {
				bad = bad || math.Abs(g.R[a][b]-w.R[a][b]) > 1e-6
			}
		}
		if bad {
			t.Fatalf("pose %d after resume %+v, uninterrupted %+v", i, g, w)
		}
	}
	a, _ := os.ReadFile(filepath.Join(full, "map.ply"))
	b, _ := os.ReadFile(filepath.Join(cut, "map.ply"))
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("map.ply of %d bytes after resume, uninterrupted %d", len(b), len(a))
	}
}

// TestRunResumeRefusals: --resume without a session, with another INPUT, or
// with a damaged session file is refused with the reason and its exit code.
func TestRunResumeRefusals(t *testing.T) {
	dir := t.TempDir()
	if code := run(context.Background(), []string{"run", "--resume", dir}); code != exitUsage {
		t.Fatalf("no session: exit %d, want %d", code, exitUsage)
	}
	if code := run(context.Background(), []string{"run"}); code != exitUsage {
		t.Fatalf("no input: exit %d, want %d", code, exitUsage)
	}
	out := filepath.Join(dir, "out")
	args := append(goldenRunArgs(t, out), "--checkpoint-every", "5", "--session")
	if code := run(context.Background(), append(args, "--first-k", "6")); code != exitOK {
		t.Fatalf("a short run with a session: exit %d", code)
	}
	state := filepath.Join(out, "session", "run.state")
	if _, err := os.Stat(state); err != nil {
		t.Fatal(err)
	}
	if code := run(context.Background(), []string{"run", dir, "--resume", out}); code != exitUsage {
		t.Fatalf("another INPUT: exit %d, want %d", code, exitUsage)
	}
	data, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-300] ^= 0x10
	if err := os.WriteFile(state, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := run(context.Background(), []string{"run", "--resume", out}); code != exitBadInput {
		t.Fatalf("damaged session: exit %d, want %d", code, exitBadInput)
	}
	if err := os.WriteFile(state, data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if code := run(context.Background(), []string{"run", "--resume", out}); code != exitBadInput {
		t.Fatalf("cut session: exit %d, want %d", code, exitBadInput)
	}
}

// A session whose input was read to the end before the run stopped resumes
// with nothing to feed: only the flush and the end, the results unchanged.
func TestRunResumeWithNothingLeft(t *testing.T) {
	out := filepath.Join(t.TempDir(), "done")
	if b, err := lingbotmapCmd(t, append(goldenRunArgs(t, out), "--checkpoint-every", "4", "--session")...).CombinedOutput(); err != nil {
		t.Fatalf("run: %v\n%s", err, b)
	}
	before, err := os.ReadFile(filepath.Join(out, "trajectory.tum"))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := lingbotmapCmd(t, "run", "--resume", out, "--no-progress").CombinedOutput(); err != nil {
		t.Fatalf("resumed run with every frame read: %v\n%s", err, b)
	}
	after, err := os.ReadFile(filepath.Join(out, "trajectory.tum"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) || len(before) == 0 {
		t.Fatalf("the trajectory changed on a resume with nothing left (%d bytes before, %d after)", len(before), len(after))
	}
}

// Every byte of a session's header is proven before a resume uses it: a
// flipped digit of the position (frames_read, which would parse and resume
// at the wrong frame) is refused as damage, and a session of the version
// before the header checksum is refused as unprovable, both with exit 5.
func TestRunResumeProvesHeader(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	args := append(goldenRunArgs(t, out), "--checkpoint-every", "5", "--session", "--first-k", "6")
	if code, msg := runCLI(t, args...); code != exitOK {
		t.Fatalf("a short run with a session: exit %d: %s", code, msg)
	}
	state := filepath.Join(out, "session", "run.state")
	good, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(good, []byte(`"frames_read":5`))
	if at < 0 || at > 1<<20 {
		t.Fatalf("no frames_read 5 in the header: %q", good[:min(len(good), 400)])
	}
	flipped := bytes.Clone(good)
	flipped[at+len(`"frames_read":`)] = '4'
	if err := os.WriteFile(state, flipped, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, msg := runCLI(t, "run", "--resume", out); code != exitBadInput || !strings.Contains(msg, "session header checksum") {
		t.Errorf("a flipped digit in the header: exit %d, stderr %q", code, msg)
	}
	older := bytes.Clone(good)
	older[7] = 1 // "LBMRUN\x00\x01": the version before the checksum
	if err := os.WriteFile(state, older, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, msg := runCLI(t, "run", "--resume", out); code != exitBadInput || !strings.Contains(msg, "older version of lingbotmap") || !strings.Contains(msg, "cannot be proven") {
		t.Errorf("a session of the previous version: exit %d, stderr %q", code, msg)
	}
}
