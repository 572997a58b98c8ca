package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"

	"github.com/lingbotmap/lingbotmap/engine/output"
	"github.com/lingbotmap/lingbotmap/engine/traj"
	"github.com/lingbotmap/lingbotmap/engine/weights"
	"github.com/lingbotmap/lingbotmap/internal/atomicfile"
	"github.com/lingbotmap/lingbotmap/internal/shared/sharedtest"
	"github.com/lingbotmap/lingbotmap/msgs/bag"
	"github.com/lingbotmap/lingbotmap/msgs/mcapbag"
	"github.com/lingbotmap/lingbotmap/msgs/mcapbag/mcaptest"
	"github.com/lingbotmap/lingbotmap/node"
)

// runCLI runs the binary's main path (parse, execute, map the error to an
// exit code) and returns the code and what went to stderr.
func runCLI(t *testing.T, args ...string) (int, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = w
	code := run(context.Background(), args)
	os.Stderr = saved
	w.Close()
	msg, _ := io.ReadAll(r)
	return code, string(msg)
}

// bench with an absurd size fails at once with a clear message and the
// usage code, before allocating anything (it used to die in the Go runtime).
func TestBenchHugeSizeFailsFast(t *testing.T) {
	t0 := time.Now()
	code, msg := runCLI(t, "bench", "--model-size", "tiny", "--width", "140000", "--height", "140000")
	if code != exitUsage || !strings.Contains(msg, "10000×10000 patch grid, beyond the 1018 patches per side") {
		t.Errorf("exit %d, stderr %q", code, msg)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	code, msg = runCLI(t, "bench", "--model-size", "tiny", "--width", "1274", "--height", "1274")
	if code != exitUsage || !strings.Contains(msg, "8281 patches a frame, more than the 8192 allowed") {
		t.Errorf("1274×1274: exit %d, stderr %q", code, msg)
	}
}

// Usage errors exit 2 wherever they are found: an unknown flag, a flag value
// out of range, and a ROS parameter with a bad value (node.ErrSettings).
func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{
		{"run", "--queue-policy", "all", "in"},        // a node setting run does not take
		{"run", "--conf-threshold", "NaN", "in"},      // a NaN setting
		{"node", "--ros", "1", "--queue-policy", "x"}, // a bad value
	} {
		if code, msg := runCLI(t, args...); code != exitUsage {
			t.Errorf("%q: exit %d, want %d (stderr %q)", args, code, exitUsage, msg)
		}
	}
	if code := exitCode(fmt.Errorf("node: %w", fmt.Errorf("%w: parameter ~queue_size must be an integer", node.ErrSettings))); code != exitUsage {
		t.Errorf("a bad ROS parameter: exit %d, want %d", code, exitUsage)
	}
}

// A checkpoint with a NaN weight or integer data under a float key stops
// any command that loads it, naming the tensor, with the bad-input code.
func TestBadCheckpointExitCode(t *testing.T) {
	golden, err := weights.OpenSafeTensors(sharedtest.Path(t, "golden", "weights.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer golden.Close()
	m, err := weights.Copy(golden)
	if err != nil {
		t.Fatal(err)
	}
	const key = "camera_head.trunk.1.attn.proj.weight"
	v, _ := m.Float32(key)
	inf, _ := m.Info(key)
	v[17] = float32(math.NaN())
	if err := m.Put(key, inf.Shape, v); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "nan.safetensors")
	if err := weights.WriteSafeTensorsFile(bad, m); err != nil {
		t.Fatal(err)
	}
	code, msg := runCLI(t, "bench", "--weights", bad, "--width", "42", "--height", "28", "--frames", "1", "--scale-frames", "1")
	if code != exitBadInput || !strings.Contains(msg, `tensor "`+key+`" (F32) holds 1 NaN and 0 ±Inf`) {
		t.Errorf("exit %d, stderr %q", code, msg)
	}
}

// A bag cut in half: run keeps what it read, says the input was partial,
// and exits with exitPartial instead of 0.
func TestRunCutBagIsPartial(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "full.bag")
	w, err := bag.Create(full)
	if err != nil {
		t.Fatal(err)
	}
	const n = 24
	for i := range n {
		stamp := time.Unix(1700000000, int64(i)*50_000_000)
		data := make([]byte, 64*48)
		for k := range data {
			data[k] = byte(i + k)
		}
		img := &sensor_msgs.Image{Header: std_msgs.Header{Stamp: stamp}, Width: 64, Height: 48, Encoding: "mono8", Step: 64, Data: data}
		if err := w.Write("/camera/image_raw", stamp, img); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(full)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut.bag")
	if err := os.WriteFile(cut, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	o := testRunOptions(t, &fakeStream{scale: 2})
	o.input = cut
	o.src.FirstK = 0
	err = runRun(context.Background(), o, true)
	if code := exitCode(err); code != exitPartial {
		t.Fatalf("exit code %d for %v", code, err)
	}
	if !strings.Contains(err.Error(), "the input is truncated or corrupt") || !strings.Contains(err.Error(), "frames were used") {
		t.Errorf("message: %v", err)
	}
	tr, err := traj.ReadTUMFile(filepath.Join(o.out, "trajectory.tum"))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr) == 0 || len(tr) >= n {
		t.Errorf("%d poses from the cut bag", len(tr))
	}
}

// eval refuses a collinear trajectory as evo does, with the bad-input code.
func TestEvalDegenerateExitCode(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for i := range 20 {
		fmt.Fprintf(&b, "%d %g %g %g 0 0 0 1\n", 100+i, 0.5*float64(i), float64(i), -0.25*float64(i))
	}
	path := filepath.Join(dir, "line.tum")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	jsonOut := filepath.Join(dir, "ate.json")
	for _, align := range []string{"sim3", "se3"} {
		code, msg := runCLI(t, "eval", path, path, "--align", align, "--json", jsonOut)
		if code != exitBadInput || !strings.Contains(msg, "degenerate covariance rank, Umeyama alignment is not possible") {
			t.Errorf("%s: exit %d, stderr %q", align, code, msg)
		}
	}
	if _, err := os.Stat(jsonOut); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused evaluation wrote %s", jsonOut)
	}
	if code, msg := runCLI(t, "eval", path, path, "--align", "none", "--json", jsonOut); code != exitOK {
		t.Errorf("--align none: exit %d, %s", code, msg)
	}
}

// eval's outputs are written whole or not at all: a failed write leaves the
// old file and no temporary file behind.
func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "plot.png")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := atomicfile.WriteFile(path, func(w io.Writer) error {
		if _, err := w.Write(bytes.Repeat([]byte("x"), 3<<20)); err != nil {
			return err
		}
		return errors.New("disk full")
	})
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("err = %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Errorf("the old file was changed: %d bytes", len(b))
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
	img := image.NewGray(image.Rect(0, 0, 3, 2))
	img.Set(1, 1, color.Gray{Y: 200})
	if err := output.WritePNG(path, img); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := png.Decode(f)
	if err != nil || got.Bounds() != img.Bounds() {
		t.Fatalf("written PNG: %v", err)
	}
	if st, _ := f.Stat(); st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", st.Mode())
	}
	// A missing directory is an error, not a panic or a stray file.
	if err := output.WritePNG(filepath.Join(dir, "no", "such", "x.png"), img); err == nil {
		t.Error("writing into a missing directory succeeded")
	}
}

// Wrong arguments are usage errors (exit 2) in every command, as wrong flags
// are: a missing or extra argument, an unknown command, a flag value that the
// command itself checks. Each fails before any file is read or model loaded.
func TestUsageErrorsExit2Everywhere(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"eval", "a"}, "accepts 2 arg(s)"},
		{[]string{"verify"}, "accepts 1 arg(s)"},
		{[]string{"run", "a", "b"}, "accepts between 0 and 1 arg(s)"},
		{[]string{"nosuchcommand"}, `unknown command "nosuchcommand"`},
		{[]string{"evl"}, "did you mean eval?"},
		{[]string{"bench", "--model-size", "tiny", "--width", "-14"}, "--width and --height must be positive multiples of 14"},
		{[]string{"bench", "--model-size", "tiny", "--frames", "0"}, "--frames must be ≥ 1"},
		{[]string{"eval", "--max-diff", "NaN", "a", "b"}, "--max-diff must be a positive number"},
		{[]string{"eval", "--max-diff", "-1", "a", "b"}, "--max-diff must be a positive number"},
		{[]string{"eval", "--offset", "Inf", "a", "b"}, "--offset must be a finite number"},
		{[]string{"eval", "--delta", "0", "a", "b"}, "--delta must be at least 1"},
		{[]string{"bag", "x"}, "unknown command"},
	} {
		code, msg := runCLI(t, c.args...)
		if code != exitUsage || !strings.Contains(msg, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and %q", c.args, code, msg, exitUsage, c.want)
		}
	}
	// no command at all prints the help and is not an error
	if code, msg := runCLI(t); code != exitOK {
		t.Errorf("no arguments: exit %d, stderr %q", code, msg)
	}
}

// A map voxel too small for 32-bit voxel indices is a usage error found
// before the model loads, not an empty map.
func TestRunTinyVoxelRefused(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	code, msg := runCLI(t, "run", "--model-size", "tiny", "--map-voxel", "1e-12", "--out", out, courthouseDir(t))
	if code != exitUsage || !strings.Contains(msg, "voxel size must be a finite number ≥ 1e-06, not 1e-12") || !strings.Contains(msg, "32-bit") {
		t.Errorf("exit %d, stderr %q", code, msg)
	}
	if _, err := os.Stat(filepath.Join(out, "run.json")); !os.IsNotExist(err) {
		t.Errorf("the refused run wrote run.json: %v", err)
	}
}

// A damaged MCAP bag (a chunk whose CRC does not match its contents) is
// partial input, as a cut ROS 1 bag is: the frames of the other chunks,
// after the damage too, are mapped, and the run exits with exitPartial and
// says so in run.json instead of "completed".
func TestRunDamagedMCAPIsPartial(t *testing.T) {
	const n = 12
	var msgs []mcaptest.Message
	for i := range n {
		stamp := time.Unix(1700000000, int64(i)*50_000_000)
		data := make([]byte, 64*48)
		for k := range data {
			data[k] = byte(i + k)
		}
		msgs = append(msgs, mcaptest.Message{LogTime: stamp,
			Msg: &sensor_msgs.Image{Header: std_msgs.Header{Stamp: stamp}, Width: 64, Height: 48, Encoding: "mono8", Step: 64, Data: data}})
	}
	b, chunks := mcaptest.OneChunkEach(t, "/camera/image_raw", "sensor_msgs/msg/Image", msgs)
	b[chunks[4]+9+24] ^= 1 // the fifth chunk's CRC, one bit off
	path := filepath.Join(t.TempDir(), "damaged.mcap")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}

	o := testRunOptions(t, &fakeStream{scale: 2})
	o.input = path
	o.src.FirstK = 0
	err := runRun(context.Background(), o, true)
	if code := exitCode(err); code != exitPartial {
		t.Fatalf("exit code %d for %v", code, err)
	}
	if !strings.Contains(err.Error(), "the input is truncated or corrupt: 11 frames were used") || !strings.Contains(err.Error(), "1 damaged chunks") || !strings.Contains(err.Error(), "CRC") {
		t.Errorf("message: %v", err)
	}
	tr, err := traj.ReadTUMFile(filepath.Join(o.out, "trajectory.tum"))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr) != n-1 {
		t.Errorf("%d poses from the damaged bag, want %d", len(tr), n-1)
	}
	if rec := readRunJSON(t, o.out); rec.Status != output.StatusPartialInput || rec.Frames.Results != n-1 {
		t.Errorf("run.json: status %s, results %d", rec.Status, rec.Frames.Results)
	}
}

// A folder of 16-bit grey PNGs whose values pass 255 only after the first
// frames: the images are decoded on workers after they were read, and the
// clipping is still reported once, before the run ends.
func TestRunWarnsGray16ClippedLate(t *testing.T) {
	dir := t.TempDir()
	for i := range 4 {
		g := image.NewGray16(image.Rect(0, 0, 28, 28))
		for k := range g.Pix {
			if k%2 == 1 {
				g.Pix[k] = byte(k) // the low byte: ≤ 255 everywhere
			} else if i >= 2 && k%8 == 0 {
				g.Pix[k] = 3 // the high byte: above 255 from the third image on
			}
		}
		var b bytes.Buffer
		if err := png.Encode(&b, g); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%03d.png", i)), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o := testRunOptions(t, &fakeStream{scale: 1})
	o.input = dir
	o.src.FirstK = 0
	var log bytes.Buffer
	o.stderr = &log
	if err := runRun(context.Background(), o, true); err != nil {
		t.Fatal(err)
	}
	// workers decode in parallel: the first noticed is the third or the fourth
	want := "16-bit grey image reduced to 8 bits: 196 of its 784 pixels are above 255 and were clipped to 255 (white), as the reference's conversion does (first in 00"
	if n := strings.Count(log.String(), "16-bit grey image"); n != 1 || !strings.Contains(log.String(), want) {
		t.Errorf("%d warnings, want once %q; log:\n%s", n, want, log.String())
	}
}

// An image folder whose image size changes, among the first frames and
// later: the frames of another model input size are skipped and counted
// (exit 4, run.json), the others are all mapped, instead of the engine
// refusing the odd frame and the run ending with nothing.
func TestRunImageSizeChangeKeepsTheRest(t *testing.T) {
	dir := t.TempDir()
	const n = 11
	for i := range n {
		w, h := 64, 48
		switch i {
		case 2, 9:
			w, h = 64, 30 // another aspect ratio: another model input
		case 5:
			w, h = 128, 96 // another size, the same model input: kept
		}
		img := image.NewRGBA(image.Rect(0, 0, w, h))
		for k := range img.Pix {
			img.Pix[k] = byte(k*7 + i)
		}
		var b bytes.Buffer
		if err := png.Encode(&b, img); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%03d.png", i)), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "out")
	code, msg := runCLI(t, "run", "--model-size", "tiny", "--image-width", "112", "--no-progress", "--out", out, dir)
	if code != exitPartial || !strings.Contains(msg, "9 frames were used; 2 did not decode and were skipped") ||
		!strings.Contains(msg, "frame 2 is 64×30, a 112×56 model input, but the run maps at 112×84, the model input of its first frame (64×48): the image size changed") {
		t.Fatalf("exit %d, stderr %q", code, msg)
	}
	tr, err := traj.ReadTUMFile(filepath.Join(out, "trajectory.tum"))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr) != n-2 {
		t.Errorf("%d poses, want %d", len(tr), n-2)
	}
	if rec := readRunJSON(t, out); rec.Status != output.StatusPartialInput || rec.Frames.Results != n-2 || rec.Input.Skipped != 2 {
		t.Errorf("run.json: status %s, results %d, skipped %d", rec.Status, rec.Frames.Results, rec.Input.Skipped)
	}
}

// A damaged MCAP file is partial input (exit 4) wherever it ends a command
// (bag play, eval), not only through run's source.
func TestMCAPDamageExitsPartial(t *testing.T) {
	err := fmt.Errorf("bag play: %w", &mcapbag.DamageError{Messages: 3, Size: 100, SkippedChunks: 1, Err: errors.New("CRC")})
	if code := exitCode(err); code != exitPartial {
		t.Errorf("exit %d for %v, want %d", code, err, exitPartial)
	}
}
