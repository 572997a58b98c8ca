package source

import (
	"bufio"
	"context"
	"image"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/msgs/bag"
)

// peakRSS is the process's high-water resident set size in MiB (VmHWM).
func peakRSS(t *testing.T) float64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatalf("peak RSS needs /proc: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", rest, err)
			}
			return kb / 1024
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// sizeMiB is $name in MiB, or def: the streaming tests run at a size that
// fits CI and can be scaled up by hand to measure (e.g. 1024).
func sizeMiB(t *testing.T, name string, def int) int {
	if s := os.Getenv(name); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("%s=%q is not a size in MiB", name, s)
		}
		return n
	}
	return def
}

// A bag much larger than the bound is read through with the peak RSS staying
// under the bound: the source holds one message at a time.
func TestBagStreamsBoundedMemory(t *testing.T) {
	const w, h = 1280, 720
	total := sizeMiB(t, "LINGBOTMAP_TEST_BAG_MIB", 256)
	n := total * (1 << 20) / (3 * w * h)
	path := filepath.Join(t.TempDir(), "big.bag")
	bw, err := bag.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	msg := &sensor_msgs.Image{Height: h, Width: w, Encoding: "rgb8", Step: 3 * w, Data: make([]byte, 3*w*h)}
	for i := range n {
		msg.Header = std_msgs.Header{Stamp: time.Unix(1700000000+int64(i), 0)}
		msg.Data[i%len(msg.Data)] = byte(i)
		if err := bw.Write("/cam", time.Unix(1700000000+int64(i), 0), msg); err != nil {
			t.Fatal(err)
		}
	}
	if err := bw.Close(); err != nil {
		t.Fatal(err)
	}
	msg = nil
	runtime.GC()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	before := peakRSS(t)

	start := time.Now()
	src, err := OpenBag(path, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	count := 0
	eachFrame(t, src, func(f engine.Frame) {
		// Message i had byte i set to i (as data byte 3i → pixel i, red).
		if f.Width != w || f.Height != h || f.Image.(*image.RGBA).Pix[4*(count/3)+count%3] != byte(count) {
			t.Fatalf("frame %d: %d×%d or wrong content", count, f.Width, f.Height)
		}
		count++
	})
	peak := peakRSS(t)
	t.Logf("bag of %.0f MiB (%d frames of %d×%d rgb8) read in %v; peak RSS %.0f MiB (%.0f MiB before reading)",
		float64(st.Size())/(1<<20), count, w, h, time.Since(start).Round(time.Millisecond), peak, before)
	if count != n {
		t.Fatalf("read %d of %d frames", count, n)
	}
	// A handful of 2.6 MiB messages and 3.5 MiB frames plus the runtime:
	// far below the file size.
	if limit := 160.0; peak > limit {
		t.Errorf("peak RSS %.0f MiB over %.0f MiB while reading a %.0f MiB bag: the source does not stream", peak, limit, float64(st.Size())/(1<<20))
	}
}

// A long video decodes with bounded memory: ffmpeg's output is read one
// frame at a time.
func TestVideoStreamsBoundedMemory(t *testing.T) {
	requireFFmpeg(t)
	const w, h, fps = 640, 360, 30
	raw := sizeMiB(t, "LINGBOTMAP_TEST_VIDEO_MIB", 512) // decoded RGBA bytes
	frames := raw * (1 << 20) / (4 * w * h)
	path := filepath.Join(t.TempDir(), "long.mp4")
	cmd := exec.Command("ffmpeg", "-nostdin", "-v", "error", "-f", "lavfi",
		"-i", "testsrc2=size=640x360:rate=30", "-frames:v", strconv.Itoa(frames),
		"-c:v", "mpeg4", "-q:v", "10", path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make the test video: %v: %s", err, out)
	}
	runtime.GC()
	before := peakRSS(t)
	start := time.Now()
	opt := DefaultOptions()
	opt.SampleFPS = 0 // decode every frame
	src, err := OpenVideo(context.Background(), path, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if src.Len() != frames {
		t.Errorf("Len %d, want %d", src.Len(), frames)
	}
	count := 0
	eachFrame(t, src, func(engine.Frame) { count++ })
	peak := peakRSS(t)
	t.Logf("video of %d frames %d×%d (%d MiB decoded) read in %v; peak RSS %.0f MiB (%.0f MiB before)",
		count, w, h, raw, time.Since(start).Round(time.Millisecond), peak, before)
	if count != frames {
		t.Fatalf("decoded %d of %d frames", count, frames)
	}
	if limit := 160.0; peak > limit {
		t.Errorf("peak RSS %.0f MiB over %.0f MiB for %d MiB of frames: the source does not stream", peak, limit, raw)
	}
}
