package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/cuda"
	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/output"
)

// folderBytes is every file under dir (but the lock file) with its bytes.
func folderBytes(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == output.LockFile {
			return err
		}
		b, err := os.ReadFile(path)
		rel, _ := filepath.Rel(dir, path)
		files[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// sameFolder fails unless dir holds exactly the files of before, byte for
// byte.
func sameFolder(t *testing.T, what, dir string, before map[string]string) {
	t.Helper()
	after := folderBytes(t, dir)
	for name, b := range before {
		if a, ok := after[name]; !ok {
			t.Errorf("%s: %s went", what, name)
		} else if a != b {
			t.Errorf("%s: %s changed (%d bytes, was %d)", what, name, len(a), len(b))
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok {
			t.Errorf("%s: %s appeared", what, name)
		}
	}
}

// shortSession runs the golden model over 6 frames, saving its session at
// 5, into out.
func shortSession(t *testing.T, out string) {
	t.Helper()
	args := append(goldenRunArgs(t, out), "--checkpoint-every", "5", "--session", "--first-k", "6")
	if code, msg := runCLI(t, args...); code != exitOK {
		t.Fatalf("a short run with a session: exit %d: %s", code, msg)
	}
}

// TestRunRefusedResumeChangesNothing: a resume refused for a damaged
// engine state, for a damaged map section, or for settings given beside it
// leaves every file of the folder as it was (it used to truncate the
// trajectory and overwrite run.json).
func TestRunRefusedResumeChangesNothing(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	shortSession(t, out)
	state := filepath.Join(out, "session", "run.state")
	good, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		at   int // byte flipped, from the end
	}{{"damaged engine state", 300}, {"damaged session body", len(good) / 2}} {
		bad := bytes.Clone(good)
		bad[len(bad)-c.at] ^= 0x10
		if err := os.WriteFile(state, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		before := folderBytes(t, out)
		if len(before["trajectory.tum"]) == 0 || before["run.json"] == "" {
			t.Fatalf("the run left no trajectory or run.json: %v", before)
		}
		if code, msg := runCLI(t, "run", "--resume", out, "--quiet"); code != exitBadInput {
			t.Fatalf("%s: exit %d, want %d: %s", c.what, code, exitBadInput, msg)
		}
		sameFolder(t, c.what, out, before)
	}
}

// TestRunResumeChecksOutputs: a session copied into another folder without
// the images it wrote, or a folder whose image changed, is refused (exit
// 5, naming what is missing or changed) instead of resuming `completed`;
// the folder as it was.
func TestRunResumeChecksOutputs(t *testing.T) {
	base := t.TempDir()
	out := filepath.Join(base, "out")
	shortSession(t, out)

	copied := filepath.Join(base, "copied")
	if err := os.MkdirAll(filepath.Join(copied, "session"), 0o755); err != nil {
		t.Fatal(err)
	}
	st, err := os.ReadFile(filepath.Join(out, "session", "run.state"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(copied, "session", "run.state"), st, 0o644); err != nil {
		t.Fatal(err)
	}
	before := folderBytes(t, copied)
	code, msg := runCLI(t, "run", "--resume", copied, "--quiet")
	if code != exitBadInput || !strings.Contains(msg, "missing") || !strings.Contains(msg, "depth/000000.png") {
		t.Fatalf("a session copied without its outputs: exit %d, want %d: %s", code, exitBadInput, msg)
	}
	sameFolder(t, "copied session", copied, before)

	img := filepath.Join(out, "depth_color", "000002.png")
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	if err := os.WriteFile(img, b, 0o644); err != nil {
		t.Fatal(err)
	}
	before = folderBytes(t, out)
	code, msg = runCLI(t, "run", "--resume", out, "--quiet")
	if code != exitBadInput || !strings.Contains(msg, "changed") || !strings.Contains(msg, "depth_color/000002.png") {
		t.Fatalf("a changed image: exit %d, want %d: %s", code, exitBadInput, msg)
	}
	sameFolder(t, "changed image", out, before)
}

// TestRunOwnsItsFolder: while a run holds an output folder, a second run
// into it is refused (exit 2, saying so) and writes nothing; once the
// owner has gone the folder is free.
func TestRunOwnsItsFolder(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	lock, err := output.Lock(out)
	if err != nil {
		t.Fatal(err)
	}
	code, msg := runCLI(t, goldenRunArgs(t, out)...)
	if code != exitUsage || !strings.Contains(msg, "in use by another lingbotmap run") {
		t.Fatalf("a second run into a held folder: exit %d, want %d: %s", code, exitUsage, msg)
	}
	if files := folderBytes(t, out); len(files) != 0 {
		t.Fatalf("the refused run wrote %v", files)
	}
	if _, err := output.Lock(out); err == nil {
		t.Fatal("the lock was taken twice")
	}
	lock.Close()
	if code, msg := runCLI(t, goldenRunArgs(t, out)...); code != exitOK {
		t.Fatalf("a run into the released folder: exit %d: %s", code, msg)
	}
}

// TestRunRemovesStaleTemporaries: the temporary files a killed run leaves
// (unlocked: the kernel released its writer's lock; see atomicfile's
// TestRemoveStale for the kill itself) do not make the next run's folder
// look used, and are removed, in the folder and in session/ and depth/ of
// a resumed one; a user's own files stay.
func TestRunRemovesStaleTemporaries(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string) {
		if err := os.WriteFile(filepath.Join(out, name), []byte("half"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(".map.ply.2718281828")
	write("notes.txt")
	args := append(goldenRunArgs(t, out), "--checkpoint-every", "5", "--session", "--first-k", "6")
	if code, msg := runCLI(t, args...); code != exitOK {
		t.Fatalf("a run into a folder with a killed run's temporary: exit %d: %s", code, msg)
	}
	if _, err := os.Stat(filepath.Join(out, ".map.ply.2718281828")); err == nil {
		t.Error("the stale .map.ply temporary is still there")
	}
	if _, err := os.Stat(filepath.Join(out, "notes.txt")); err != nil {
		t.Error("the user's file went")
	}
	write(filepath.Join("session", ".run.state.31415"))
	write(filepath.Join("depth", ".000003.png.9265"))
	if code, msg := runCLI(t, "run", "--resume", out, "--quiet"); code != exitOK {
		t.Fatalf("resume: exit %d: %s", code, msg)
	}
	for _, name := range []string{"session/.run.state.31415", "depth/.000003.png.9265"} {
		if _, err := os.Stat(filepath.Join(out, name)); err == nil {
			t.Errorf("the stale %s is still there", name)
		}
	}
}

// TestRunFailedStartLeavesNothing: a run that cannot start (weights that
// do not exist, a device this build lacks) leaves no output in the folder,
// so the corrected command needs no --force.
func TestRunFailedStartLeavesNothing(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	good := goldenRunArgs(t, out)
	cpuOnly := engine.DefaultConfig()
	cpuOnly.Device = "cuda"
	_, notBuilt := backendFactory(nil)(cpuOnly)
	for _, c := range []struct {
		what string
		args []string
	}{
		{"missing weights", append(append([]string{}, good...), "--weights", filepath.Join(out, "nope.safetensors"))},
		{"no such device", append(append([]string{}, good...), "--device", "cuda")},
	} {
		if c.what != "no such device" || errors.Is(notBuilt, cuda.ErrNotBuilt) {
			if code, msg := runCLI(t, c.args...); code == exitOK {
				t.Fatalf("%s: the run started: %s", c.what, msg)
			}
			if files := folderBytes(t, out); len(files) != 0 {
				t.Fatalf("%s: the failed run left %v", c.what, files)
			}
			if ents, _ := os.ReadDir(out); len(ents) > 1 {
				t.Fatalf("%s: the failed run left %v", c.what, ents)
			}
		}
	}
	if code, msg := runCLI(t, good...); code != exitOK {
		t.Fatalf("the corrected run: exit %d: %s", code, msg)
	}
}

// TestRunResumeRefusesOtherSettings: settings given beside --resume that
// differ from the session's are refused (exit 2, each named with both
// values) and change nothing; the same values, a new checkpoint cadence
// and an environment variable (reported, the session's value used) resume.
func TestRunResumeRefusesOtherSettings(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	shortSession(t, out)
	before := folderBytes(t, out)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--map-voxel", "0.5"}, []string{"--map-voxel 0.5 (the session's: 0.02)"}},
		{[]string{"--stride", "2", "--scale-frames", "4"}, []string{"--stride 2 (the session's: 1)", "--scale-frames 4 (the session's: 3)"}},
		{[]string{"--out", filepath.Join(out, "elsewhere")}, []string{"--out " + filepath.Join(out, "elsewhere")}},
	} {
		code, msg := runCLI(t, append([]string{"run", "--resume", out, "--quiet"}, c.args...)...)
		if code != exitUsage {
			t.Fatalf("%v beside --resume: exit %d, want %d: %s", c.args, code, exitUsage, msg)
		}
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%v beside --resume: the message does not say %q: %s", c.args, w, msg)
			}
		}
		sameFolder(t, strings.Join(c.args, " "), out, before)
	}
	t.Setenv("LINGBOTMAP_THREADS", "1")
	code, msg := runCLI(t, "run", "--resume", out, "--image-width", "70", "--checkpoint-every", "2", "--no-progress")
	if code != exitOK {
		t.Fatalf("the same image width and a new cadence beside --resume: exit %d: %s", code, msg)
	}
	if !strings.Contains(msg, "--resume uses the session's setting") || !strings.Contains(msg, "key=threads") {
		t.Errorf("the environment's other thread count was not reported: %s", msg)
	}
}

// TestRunRandomModelWarns: a run without --weights says, in a warning block
// even with --quiet and in run.json, that it mapped with the random test
// model; a run with weights names them as meaningful.
func TestRunRandomModelWarns(t *testing.T) {
	base := t.TempDir()
	random := filepath.Join(base, "random")
	args := []string{"run", courthouseDir(t), "--out", random, "--image-width", "70", "--scale-frames", "2", "--first-k", "3",
		"--model-size", "tiny", "--threads", "2", "--quiet"}
	code, msg := runCLI(t, args...)
	if code != exitOK {
		t.Fatalf("run without weights: exit %d: %s", code, msg)
	}
	if !strings.Contains(msg, "WARNING") || !strings.Contains(msg, "RANDOM TEST MODEL") || !strings.Contains(msg, "noise, not a map") {
		t.Errorf("no warning on the terminal: %s", msg)
	}
	if rec := readRunJSON(t, random); rec.Weights != output.RandomWeights || rec.Meaningful {
		t.Errorf("run.json says weights %q, meaningful %v", rec.Weights, rec.Meaningful)
	}
	real := filepath.Join(base, "real")
	code, msg = runCLI(t, append(goldenRunArgs(t, real), "--first-k", "3")...)
	if code != exitOK {
		t.Fatalf("run with weights: exit %d: %s", code, msg)
	}
	if strings.Contains(msg, "RANDOM TEST MODEL") {
		t.Errorf("a run with weights warned of the random model: %s", msg)
	}
	if rec := readRunJSON(t, real); !rec.Meaningful || !strings.HasSuffix(rec.Weights, "weights.safetensors") {
		t.Errorf("run.json of a run with weights says weights %q, meaningful %v", rec.Weights, rec.Meaningful)
	}
}

// TestRunResumeHintNamesSession: --resume of a folder without a session
// names the flag that saves one (--session; --checkpoint-every alone saves
// none), with exit 2.
func TestRunResumeHintNamesSession(t *testing.T) {
	code, msg := runCLI(t, "run", "--resume", t.TempDir())
	if code != exitUsage || !strings.Contains(msg, "a run with --session saves one") {
		t.Fatalf("exit %d, message %q", code, msg)
	}
}
