package test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io/fs"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/engine/occgrid"
	"github.com/lingbotmap/lingbotmap/engine/traj"
	"github.com/lingbotmap/lingbotmap/internal/shared"
	"github.com/lingbotmap/lingbotmap/node/ros1/rostest"
)

// crashRunArgs is `run` on the golden tiny model over the 24 courthouse
// frames: about a second and a half on two cores, with a checkpoint every
// two frames so that kills land inside checkpoints too.
func crashRunArgs(t *testing.T, out string, extra ...string) []string {
	t.Helper()
	frames, err := shared.Path("data", "courthouse")
	if err != nil {
		t.Fatal(err)
	}
	weights, err := shared.Path("golden", "weights.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"run", frames, "--weights", weights, "--image-width", "70",
		"--scale-frames", "3", "--sliding-window", "4", "--threads", "2",
		"--checkpoint-every", "2", "--no-progress", "--out", out}, extra...)
}

// runStatus is the part of run.json the checks read.
type runStatus struct {
	Status string `json:"status"`
	Frames struct {
		Results int `json:"results"`
	} `json:"frames"`
}

// checkOutputs checks that every file a run left in out parses and none is
// torn: trajectory rows, the PLY body against its header, run.json, every
// PNG, depth_color/ranges.tsv; run.json's frame count is covered by the
// trajectory and the map. Hidden files are an atomic writer's temporaries,
// never read by anyone; tempsAllowed says whether any may be left (a
// killed process cannot remove its own). It returns run.json's content
// (zero without one).
func checkOutputs(t *testing.T, out string, tempsAllowed bool) runStatus {
	t.Helper()
	var rs runStatus
	rows, mapFrames := -1, -1
	err := filepath.WalkDir(out, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name := d.Name()
		if name == ".lingbotmap.lock" {
			return nil // the folder's owner lock, which stays (engine/output.LockFile)
		}
		if strings.HasPrefix(name, ".") {
			if !tempsAllowed {
				return fmt.Errorf("temporary file %s left behind", path)
			}
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		switch {
		case name == mapio.TrajectoryFile:
			rows = strings.Count(string(data), "\n") - 1 // the header line
			if !bytes.HasPrefix(data, []byte("# timestamp")) {
				return fmt.Errorf("%s: no header: %q", path, data)
			}
			if rows > 0 {
				tr, err := traj.ReadTUM(bytes.NewReader(data))
				if err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
				if len(tr) != rows {
					return fmt.Errorf("%s: %d whole rows but %d poses", path, rows, len(tr))
				}
			}
		case name == mapio.MapFile:
			pts, comments, err := mapio.ReadPLY(bytes.NewReader(data))
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			body := bytes.Index(data, []byte("end_header\n")) + len("end_header\n")
			if len(data)-body != 15*len(pts) {
				return fmt.Errorf("%s: header says %d vertices (%d bytes), the body has %d bytes", path, len(pts), 15*len(pts), len(data)-body)
			}
			for _, c := range comments {
				if n, ok := strings.CutPrefix(c, "frames "); ok {
					mapFrames, _ = strconv.Atoi(n)
				}
			}
		case name == "run.json":
			if err := json.Unmarshal(data, &rs); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			switch rs.Status {
			case "in_progress", "completed", "interrupted", "partial_input", "failed":
			default:
				return fmt.Errorf("%s: status %q", path, rs.Status)
			}
		case name == "map.yaml":
			// map_server's pair: the YAML names map.pgm, written before it,
			// and ReadMapServer checks the image against it
			if _, err := occgrid.ReadMapServer(path); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
		case name == "map.pgm":
			if !bytes.HasPrefix(data, []byte("P5")) {
				return fmt.Errorf("%s: not a binary PGM", path)
			}
		case strings.HasSuffix(name, ".png"):
			if _, err := png.Decode(bytes.NewReader(data)); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
		case name == "run.state" && filepath.Base(filepath.Dir(path)) == "session":
			// read back by --resume, which checks its checksums
			if len(data) == 0 {
				return fmt.Errorf("%s: empty", path)
			}
		case name == "ranges.tsv":
			sc := bufio.NewScanner(bytes.NewReader(data))
			for sc.Scan() {
				if l := sc.Text(); !strings.HasPrefix(l, "#") && len(strings.Split(l, "\t")) != 3 {
					return fmt.Errorf("%s: line %q", path, l)
				}
			}
			if !bytes.HasSuffix(data, []byte("\n")) {
				return fmt.Errorf("%s: torn", path)
			}
		default:
			return fmt.Errorf("unexpected file %s", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if rs.Status != "" {
		if rows < rs.Frames.Results {
			t.Fatalf("%s: run.json counts %d frames, the trajectory has %d rows", out, rs.Frames.Results, rows)
		}
		if rs.Frames.Results > 0 && mapFrames < rs.Frames.Results {
			t.Fatalf("%s: run.json counts %d frames, map.ply covers %d", out, rs.Frames.Results, mapFrames)
		}
	}
	return rs
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts a tmpfs in a private mount namespace and needs root (CI runs as root)")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatal("unshare (util-linux) is needed")
	}
}

// TestRunSurvivesKillsAndFullDisks kills `run` with SIGKILL at random
// moments, from the start to the final writes, and runs it on small
// tmpfs file systems that fill up: every file left behind must parse.
func TestRunSurvivesKillsAndFullDisks(t *testing.T) {
	requireRoot(t)
	bin := binary(t)
	root := t.TempDir()

	// An uninterrupted run: the reference time and outputs.
	full := filepath.Join(root, "full")
	t0 := time.Now()
	if out, err := exec.Command(bin, crashRunArgs(t, full)...).CombinedOutput(); err != nil {
		t.Fatalf("uninterrupted run: %v\n%s", err, out)
	}
	base := time.Since(t0)
	if rs := checkOutputs(t, full, false); rs.Status != "completed" || rs.Frames.Results != 24 {
		t.Fatalf("uninterrupted run: %+v", rs)
	}

	seed := uint64(time.Now().UnixNano())
	t.Logf("uninterrupted run %v; kill seed %d", base, seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	deadline := time.Now().Add(10 * time.Second)
	statuses := map[string]int{}
	resumed := 0
	for i := 0; i < 12 && time.Now().Before(deadline); i++ {
		out := filepath.Join(root, fmt.Sprintf("kill%02d", i))
		// Half the kills fall in the last third of the run, where the
		// final checkpoint writes the map, the preview and run.json.
		at := time.Duration(rng.Float64() * float64(base))
		if i%2 == 1 {
			at = base*2/3 + time.Duration(rng.Float64()*float64(base)/3)
		}
		cmd := exec.Command(bin, crashRunArgs(t, out, "--session")...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(at)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if _, err := os.Lstat(out); errors.Is(err, fs.ErrNotExist) {
			// killed before the run made its folder (a busy machine can
			// still be loading the model): nothing written, nothing lost
			statuses["no folder yet"]++
			continue
		}
		rs := checkOutputs(t, out, true)
		statuses[rs.Status]++
		// A run killed after its first session save resumes and ends with
		// the uninterrupted trajectory.
		if _, err := os.Stat(filepath.Join(out, "session", "run.state")); err != nil || rs.Status == "completed" {
			continue
		}
		if msg, err := exec.Command(bin, "run", "--resume", out, "--no-progress").CombinedOutput(); err != nil {
			t.Fatalf("kill %d: --resume: %v\n%s", i, err, msg)
		}
		if rs := checkOutputs(t, out, true); rs.Status != "completed" || rs.Frames.Results != 24 {
			t.Fatalf("kill %d: after --resume run.json says %+v", i, rs)
		}
		compareTrajectories(t, filepath.Join(full, mapio.TrajectoryFile), filepath.Join(out, mapio.TrajectoryFile))
		resumed++
	}
	t.Logf("run.json status after the kills: %v; %d killed runs resumed to the uninterrupted trajectory", statuses, resumed)
	if resumed == 0 {
		t.Fatal("no kill landed after a session save, so no resume was checked")
	}

	// Kills aimed inside a checkpoint: the moment a temporary file of
	// map.ply, run.json or preview.png appears, the process is killed.
	during := 0
	for i := range 3 {
		out := filepath.Join(root, fmt.Sprintf("inwrite%d", i))
		cmd := exec.Command(bin, crashRunArgs(t, out)...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		skip := i // let the first checkpoints pass, to land in later ones
	poll:
		for {
			select {
			case <-done:
				break poll
			default:
			}
			ents, _ := os.ReadDir(out)
			for _, e := range ents {
				n := e.Name()
				if strings.HasPrefix(n, ".map.ply.") || strings.HasPrefix(n, ".run.json.") || strings.HasPrefix(n, ".preview.png.") {
					if skip > 0 {
						skip--
						time.Sleep(20 * time.Millisecond)
						continue poll
					}
					_ = cmd.Process.Kill()
					during++
					break poll
				}
			}
			time.Sleep(100 * time.Microsecond)
		}
		<-done
		checkOutputs(t, out, true)
	}
	if during == 0 {
		t.Fatal("no kill landed while a checkpoint file was being written")
	}
	t.Logf("%d of 3 kills landed while a checkpoint file was being written", during)

	// Full disks: the run fails with the reason, and what it wrote parses.
	for _, size := range []string{"40k", "500k", "1200k"} {
		mnt := filepath.Join(root, "tmpfs-"+size)
		keep := filepath.Join(root, "left-"+size)
		if err := os.Mkdir(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		args := crashRunArgs(t, filepath.Join(mnt, "out"))
		script := `mount -t tmpfs -o size="$1" tmpfs "$2" || exit 99; shift 3; "$@"; rc=$?; cp -a "$0" "$KEEP" 2>/dev/null; exit $rc`
		cmd := exec.Command("unshare", append([]string{"-m", "sh", "-c", script, filepath.Join(mnt, "out"), size, mnt, "--", bin}, args...)...)
		cmd.Env = append(os.Environ(), "KEEP="+keep)
		msg, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 99 || ee.ExitCode() == 0 {
			t.Fatalf("tmpfs %s: exit %v, want a failure of the run:\n%s", size, err, msg)
		}
		if !strings.Contains(string(msg), "no space left on device") {
			t.Fatalf("tmpfs %s: the error does not say the disk is full:\n%s", size, msg)
		}
		if _, err := os.Stat(keep); err == nil {
			rs := checkOutputs(t, keep, false)
			t.Logf("tmpfs %s: exit %d, run.json %+v", size, ee.ExitCode(), rs)
		} else {
			t.Logf("tmpfs %s: exit %d, nothing written", size, ee.ExitCode())
		}
	}
}

// TestRunRefusesUsedFolder: a second run into the same folder is refused
// before any work; with --force the old outputs are removed first, so no
// depth image of the first run survives into the second.
func TestRunRefusesUsedFolder(t *testing.T) {
	bin := binary(t)
	out := filepath.Join(t.TempDir(), "out")
	if msg, err := exec.Command(bin, crashRunArgs(t, out, "--first-k", "6")...).CombinedOutput(); err != nil {
		t.Fatalf("first run: %v\n%s", err, msg)
	}
	stale := filepath.Join(out, "depth", "000005.png")
	if _, err := os.Stat(stale); err != nil {
		t.Fatal(err)
	}
	msg, err := exec.Command(bin, crashRunArgs(t, out, "--first-k", "4")...).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(msg), "holds a previous run") || !strings.Contains(string(msg), "--force") {
		t.Fatalf("rerun: %v\n%s", err, msg)
	}
	if msg, err := exec.Command(bin, crashRunArgs(t, out, "--first-k", "4", "--force")...).CombinedOutput(); err != nil {
		t.Fatalf("rerun with --force: %v\n%s", err, msg)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a depth image of the first run survived --force: %v", err)
	}
	if rs := checkOutputs(t, out, false); rs.Status != "completed" || rs.Frames.Results != 4 {
		t.Errorf("after --force: %+v", rs)
	}
}

// TestRunStopsCleanlyOnSignals: SIGINT, SIGTERM and SIGHUP each end a run
// the same way: run.json says interrupted, and every file parses.
func TestRunStopsCleanlyOnSignals(t *testing.T) {
	bin := binary(t)
	root := t.TempDir()
	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP} {
		out := filepath.Join(root, strings.ReplaceAll(sig.String(), " ", "_"))
		// A slow stream (a larger model input) leaves time to signal it mid-run.
		cmd := exec.Command(bin, crashRunArgs(t, out, "--image-width", "280")...)
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the first checkpoint", 30*time.Second, func() bool {
			b, _ := os.ReadFile(filepath.Join(out, "map.ply"))
			return len(b) > 0
		})
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(buf.String(), "interrupted after") {
			t.Fatalf("%v: exit %v\n%s", sig, err, buf.String())
		}
		rs := checkOutputs(t, out, false)
		if rs.Status != "interrupted" || rs.Frames.Results == 0 || rs.Frames.Results >= 24 {
			t.Fatalf("%v: run.json %+v", sig, rs)
		}
	}
}

// TestNodeReportsBadWeightsWithoutMaster: the node loads its weights before
// it waits for a ROS master, so a weights path that does not exist ends it
// at once with the reason, with no master running.
func TestNodeReportsBadWeightsWithoutMaster(t *testing.T) {
	bin := binary(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close() // nothing answers there: no master
	missing := filepath.Join(t.TempDir(), "no-such-weights.safetensors")
	cmd := exec.Command(bin, "node", "--ros", "1", "--weights", missing)
	cmd.Env = append(os.Environ(), fmt.Sprintf("ROS_MASTER_URI=http://127.0.0.1:%d/", port), "ROS_HOSTNAME=localhost", "ROS_HOME="+t.TempDir())
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !strings.Contains(buf.String(), missing) {
			t.Fatalf("exit %v, want a failure naming %s:\n%s", err, missing, buf.String())
		}
		if strings.Contains(buf.String(), "cannot register") {
			t.Errorf("the node waited for the master first:\n%s", buf.String())
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the node did not report its bad weights without a master:\n%s", buf.String())
	}
}

// TestNodeParamsRestartTheEngine: a ROS parameter that changes an engine
// setting still applies: the engine built from the flags is replaced by
// one built with the parameter (here a weights path that does not exist,
// so the node fails naming it).
func TestNodeParamsRestartTheEngine(t *testing.T) {
	m := rostest.StartMaster(t)
	missing := filepath.Join(t.TempDir(), "param-weights.safetensors")
	m.Run(t, 20*time.Second, "rosparam", "set", "/restart/weights", missing)
	p := startNode(t, m, "--model-size=tiny", "--seed=7", "--image-width=140", "--threads=2", "__name:=restart")
	err := p.wait(t, 30*time.Second)
	if err == nil || !strings.Contains(p.out.String(), missing) || !strings.Contains(p.out.String(), "restarting") {
		t.Fatalf("exit %v, want the engine restarted with the parameter's weights:\n%s", err, p.out.String())
	}
}

// compareTrajectories requires the trajectory in got to equal want's: the
// same stamps, positions and rotations to 1e-6 relative.
func compareTrajectories(t *testing.T, want, got string) {
	t.Helper()
	a, err := traj.ReadTUMFile(want)
	if err != nil {
		t.Fatal(err)
	}
	b, err := traj.ReadTUMFile(got)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != len(b) {
		t.Fatalf("%s has %d poses, %s %d", got, len(b), want, len(a))
	}
	for i := range a {
		x, y := a[i], b[i]
		vals := [][2]float64{{x.Time, y.Time}}
		for k := range 3 {
			vals = append(vals, [2]float64{x.T[k], y.T[k]})
		}
		for r := range 3 {
			for c := range 3 {
				vals = append(vals, [2]float64{x.R[r][c], y.R[r][c]})
			}
		}
		for _, v := range vals {
			if d := math.Abs(v[0] - v[1]); d > 1e-6*math.Max(1, math.Abs(v[0])) {
				t.Fatalf("pose %d differs after --resume: %v, uninterrupted %v", i, y, x)
			}
		}
	}
}
