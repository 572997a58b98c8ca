package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/spf13/cobra"

	"github.com/lingbotmap/lingbotmap/internal/shared"
	"github.com/lingbotmap/lingbotmap/msgs"
	"github.com/lingbotmap/lingbotmap/msgs/bag"
	"github.com/lingbotmap/lingbotmap/node"
)

func courthouseDir(t *testing.T) string {
	t.Helper()
	dir, err := shared.Path("data", "courthouse")
	if err != nil {
		t.Fatalf("locating the shared test images: %v", err)
	}
	return dir
}

func TestBagFlags(t *testing.T) {
	var got *bagOptions
	cmd := newBagCmdWith(func(_ context.Context, o *bagOptions, _ io.Writer) error { got = o; return nil })
	cmd.SetArgs([]string{"--images", "d", "--out", "x.bag", "--frame-rate", "2.5", "--topic", "/a/b", "--frame-id", "cam",
		"--compressed", "--start", "1600000000.5", "--first-k", "7", "--stride", "3"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	want := bagOptions{images: "d", out: "x.bag", format: "bag", topic: "/a/b", frameID: "cam", rate: 2.5, start: 1600000000.5, compressed: true, firstK: 7, stride: 3}
	if *got != want {
		t.Fatalf("parsed %+v, want %+v", *got, want)
	}

	for _, args := range [][]string{
		{},                                     // no --images
		{"--images", "d", "--frame-rate", "0"}, // frame rate
		{"--images", "d", "--rate", "0"},       // its old name
		{"--images", "d", "--stride", "0"},     // stride
		{"--images", "d", "--first-k", "-1"},   // first-k
		{"--images", "d", "--start", "-5"},     // start
		{"--images", "d", "--topic", ""},       // topic
		{"--images", "d", "--format", "db3"},   // format
	} {
		cmd := newBagCmdWith(func(context.Context, *bagOptions, io.Writer) error { t.Fatal("ran despite bad flags"); return nil })
		cmd.SetArgs(args)
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		var ec *exitCodeError
		if err := cmd.Execute(); !errors.As(err, &ec) || ec.code != exitUsage {
			t.Errorf("args %q: error %v, want a usage error", args, err)
		}
	}
}

// The raw bag holds every courthouse frame, pixel for pixel, with the right
// stamps and sequence numbers; rosbag info agrees.
func TestBagCommandRaw(t *testing.T) {
	dir := courthouseDir(t)
	o := defaultBagOptions()
	o.images = dir
	o.out = filepath.Join(t.TempDir(), "frames.bag")
	var out bytes.Buffer
	if err := runBag(context.Background(), o, &out); err != nil {
		t.Fatal(err)
	}
	r, err := bag.Open(o.out)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "*.png"))
	i := 0
	for m, err := range r.Messages() {
		if err != nil {
			t.Fatal(err)
		}
		var im sensor_msgs.Image
		if err := m.Decode(&im); err != nil {
			t.Fatal(err)
		}
		stamp := time.Unix(1700000000, int64(i)*100_000_000)
		if m.Topic != "/camera/image_raw" || im.Header.Seq != uint32(i) || !im.Header.Stamp.Equal(stamp) || !m.Time.Equal(stamp) ||
			im.Header.FrameId != "camera" || im.Width != 518 || im.Height != 294 || im.Encoding != "rgb8" {
			t.Fatalf("frame %d: %s %+v at %v", i, m.Topic, im.Header, m.Time)
		}
		if i%8 == 0 { // compare whole frames against the PNG decoder now and then
			got, err := msgs.DecodeImage(&im)
			if err != nil {
				t.Fatal(err)
			}
			want := decodePNG(t, files[i])
			for y := range 294 {
				for x := range 518 {
					wr, wg, wb, _ := want.At(x, y).RGBA()
					o := got.PixOffset(x, y)
					if got.Pix[o] != uint8(wr>>8) || got.Pix[o+1] != uint8(wg>>8) || got.Pix[o+2] != uint8(wb>>8) {
						t.Fatalf("frame %d pixel (%d,%d) = %v, want %d %d %d", i, x, y, got.Pix[o:o+3], wr>>8, wg>>8, wb>>8)
					}
				}
			}
		}
		i++
	}
	if i != 24 || len(files) != 24 {
		t.Fatalf("bag holds %d frames of %d files, want 24", i, len(files))
	}

	rosbag, err := exec.LookPath("rosbag")
	if err != nil {
		t.Fatal("rosbag is not on PATH: install Debian's ROS tools (apt-get install python3-rosbag, see docs/ros-notes.md §6)")
	}
	cmd := exec.Command(rosbag, "info", o.out)
	cmd.Env = append(os.Environ(), "ROS_HOME="+t.TempDir())
	info, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("rosbag info: %v\n%s", err, info)
	}
	for _, re := range []string{`/camera/image_raw\s+24 msgs\s+:\s+sensor_msgs/Image`, `(?m)^duration:\s+2\.3s$`,
		`\(1700000000\.00\)`, `\(1700000002\.30\)`, `sensor_msgs/Image\s+\[060021388200f6f0f447d0fcd9c64743\]`} {
		if !regexp.MustCompile(re).Match(info) {
			t.Errorf("rosbag info lacks %s:\n%s", re, info)
		}
	}
}

func TestBagCommandCompressed(t *testing.T) {
	dir := courthouseDir(t)
	o := defaultBagOptions()
	o.images, o.out = dir, filepath.Join(t.TempDir(), "c.bag")
	o.compressed, o.firstK, o.stride, o.rate, o.topic = true, 6, 2, 4, "/cam/image/compressed"
	if err := runBag(context.Background(), o, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	r, err := bag.Open(o.out)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	i := 0
	for m, err := range r.Messages() {
		if err != nil {
			t.Fatal(err)
		}
		var c sensor_msgs.CompressedImage
		if err := m.Decode(&c); err != nil {
			t.Fatal(err)
		}
		file, err := os.ReadFile(filepath.Join(dir, []string{"000000.png", "000002.png", "000004.png"}[min(i, 2)]))
		if err != nil {
			t.Fatal(err)
		}
		if m.Topic != o.topic || c.Format != "png" || !bytes.Equal(c.Data, file) || c.Header.Seq != uint32(i) ||
			!c.Header.Stamp.Equal(time.Unix(1700000000, int64(i)*250_000_000)) {
			t.Fatalf("message %d: %s format %q seq %d stamp %v, %d bytes", i, m.Topic, c.Format, c.Header.Seq, c.Header.Stamp, len(c.Data))
		}
		i++
	}
	if i != 3 {
		t.Fatalf("%d frames, want 3 (first 6, every 2nd)", i)
	}
}

func TestBagCommandErrors(t *testing.T) {
	o := defaultBagOptions()
	o.images = t.TempDir()
	o.out = filepath.Join(t.TempDir(), "x.bag")
	if err := runBag(context.Background(), o, &bytes.Buffer{}); err == nil {
		t.Error("an empty folder was accepted")
	}
	o.images = filepath.Join(o.images, "missing")
	if err := runBag(context.Background(), o, &bytes.Buffer{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing folder: %v", err)
	}
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "a.png"), []byte("not a png"), 0o644); err != nil {
		t.Fatal(err)
	}
	o.images = bad
	if err := runBag(context.Background(), o, &bytes.Buffer{}); err == nil {
		t.Error("a corrupt PNG was accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	o.images = courthouseDir(t)
	if err := runBag(ctx, o, &bytes.Buffer{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled run: %v", err)
	}
}

// TestBagRemovesStaleTemporary: the unfinished file a killed `bag` left
// for its --out (unlocked once its writer died) is removed by the next bag
// run to that path; another file's temporary stays.
func TestBagRemovesStaleTemporary(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "frames.bag")
	stale, other := filepath.Join(dir, ".frames.bag.1618033"), filepath.Join(dir, ".other.bag.1618033")
	for _, p := range []string{stale, other} {
		if err := os.WriteFile(p, []byte("#ROSBAG V2.0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if code, msg := runCLI(t, "bag", "--images", courthouseDir(t), "--out", out, "--first-k", "2"); code != exitOK {
		t.Fatalf("bag: exit %d: %s", code, msg)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Error("the killed bag run's temporary is still there")
	}
	if _, err := os.Stat(other); err != nil {
		t.Error("another path's temporary was removed")
	}
	if _, err := os.Stat(out); err != nil {
		t.Error(err)
	}
}

// TestFrameRateNames: one name per meaning. A frame rate is --frame-rate
// in run, bag and bench --pipeline; bag's and bench's old --rate still
// works, with a deprecation warning, while bag play's --rate is its speed
// factor; run's default folder follows the node's save_dir convention.
func TestFrameRateNames(t *testing.T) {
	var got *bagOptions
	cmd := newBagCmdWith(func(_ context.Context, o *bagOptions, _ io.Writer) error { got = o; return nil })
	var errOut bytes.Buffer
	cmd.SetOut(&errOut)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"--images", "d", "--rate", "4"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got.rate != 4 || !strings.Contains(errOut.String(), "--rate has been deprecated, use --frame-rate") {
		t.Errorf("bag --rate 4: rate %v, output %q", got.rate, errOut.String())
	}
	for _, c := range []struct {
		cmd  *cobra.Command
		flag string
	}{{newRunCmd(), "frame-rate"}, {newBagCmd(), "frame-rate"}, {newBenchCmd(), "frame-rate"}} {
		if c.cmd.Flags().Lookup(c.flag) == nil {
			t.Errorf("%s has no --%s", c.cmd.Name(), c.flag)
		}
	}
	if f := newBagPlayCmd().Flags().Lookup("rate"); f == nil || !strings.Contains(f.Usage, "speed factor") {
		t.Errorf("bag play --rate: %+v", f)
	}
	if f := newBenchCmd().Flags().Lookup("rate"); f == nil || f.Deprecated == "" {
		t.Errorf("bench --rate is not a deprecated alias: %+v", f)
	}
	if o := defaultRunOptions(); o.out != "lingbotmap_run" || !strings.HasPrefix(node.DefaultConfig().SaveDir, "lingbotmap_") {
		t.Errorf("default folders %q and %q follow two conventions", o.out, node.DefaultConfig().SaveDir)
	}
}
