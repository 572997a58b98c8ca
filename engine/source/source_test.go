package source

import (
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/internal/shared"
)

// eachFrame reads a source to its end, failing on an error, and hands fn
// each frame without keeping it: the streaming tests measure memory.
func eachFrame(t *testing.T, s Source, fn func(engine.Frame)) {
	t.Helper()
	for {
		f, err := s.Next(context.Background())
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		fn(f)
	}
}

// readAll drains a source.
func readAll(t *testing.T, s Source) []engine.Frame {
	t.Helper()
	var out []engine.Frame
	eachFrame(t, s, func(f engine.Frame) { out = append(out, f) })
	return out
}

func TestFolderRealImages(t *testing.T) {
	dir, err := shared.Path("data", "courthouse")
	if err != nil {
		t.Fatal(err)
	}
	opt := DefaultOptions()
	src, err := Open(context.Background(), dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if src.Len() != 24 {
		t.Fatalf("Len %d, want the 24 courthouse images", src.Len())
	}
	frames := readAll(t, src)
	if len(frames) != 24 {
		t.Fatalf("read %d frames", len(frames))
	}
	// The same pixels as decoding the file directly.
	f, err := os.Open(filepath.Join(dir, "000005.png"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := png.Decode(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := frames[5]
	if got.Seq != 5 || got.Width != 518 || got.Height != 294 || got.Image.Bounds() != want.Bounds() {
		t.Fatalf("frame 5: seq %d, %d×%d", got.Seq, got.Width, got.Height)
	}
	for _, p := range []image.Point{{0, 0}, {100, 200}, {517, 293}} {
		if got.Image.At(p.X, p.Y) != want.At(p.X, p.Y) {
			t.Errorf("pixel %v differs", p)
		}
	}
	// Names are frame numbers, not times: stamps at 30 fps.
	if s := mapio.Seconds(frames[3].Stamp); math.Abs(s-0.1) > 1e-9 {
		t.Errorf("frame 3 at %g s, want 0.1", s)
	}

	// first-k 10, then stride 3: files 0, 3, 6, 9.
	opt.FirstK, opt.Stride, opt.FrameRate = 10, 3, 10
	sel, err := OpenFolder(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	frames = readAll(t, sel)
	if sel.Len() != 4 || len(frames) != 4 {
		t.Fatalf("first-k 10 stride 3: Len %d, read %d", sel.Len(), len(frames))
	}
	for i, f := range frames {
		if f.Seq != uint64(3*i) || math.Abs(mapio.Seconds(f.Stamp)-0.3*float64(i)) > 1e-9 {
			t.Errorf("frame %d: seq %d at %g s", i, f.Seq, mapio.Seconds(f.Stamp))
		}
	}
	if files := sel.Files(); files[3] != "000009.png" {
		t.Errorf("files %v", files)
	}

	// --rotate-cw90: the left column of the picture becomes its top row.
	opt = DefaultOptions()
	opt.FirstK, opt.RotateCW90 = 6, true
	rot, err := OpenFolder(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	frames = readAll(t, rot)
	r5 := frames[5]
	if r5.Width != 294 || r5.Height != 518 {
		t.Fatalf("turned frame is %d×%d, want 294×518", r5.Width, r5.Height)
	}
	for _, p := range []image.Point{{0, 0}, {293, 0}, {0, 517}, {100, 200}} {
		// Turned clockwise: (x, y) shows the original (y, h−1−x).
		if a, b := r5.Image.At(p.X, p.Y), want.At(p.Y, 293-p.X); color.RGBAModel.Convert(a) != color.RGBAModel.Convert(b) {
			t.Errorf("turned pixel %v is %v, want %v", p, a, b)
		}
	}
}

func writePNG(t *testing.T, path string, img image.Image) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
}

func TestFolderGlobAndStamps(t *testing.T) {
	dir := t.TempDir()
	img := image.NewRGBA(image.Rect(0, 0, 4, 3))
	// The reference's glob: .png, .jpg, .JPG only. JPEG content under .jpg is
	// decoded by content, so PNG bytes are fine for the listing test.
	for _, n := range []string{"1305031102.275304.png", "1305031102.175304.jpg", "1305031102.375304.JPG", "x.jpeg", "y.PNG", "notes.txt", ".hidden.png"} {
		writePNG(t, filepath.Join(dir, n), img)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.png"), 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := OpenFolder(dir, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	frames := readAll(t, src)
	if len(frames) != 3 {
		t.Fatalf("read %d frames (%v), want 3", len(frames), src.Files())
	}
	// Sorted by name; TUM-style names are the stamps.
	for i, want := range []float64{1305031102.175304, 1305031102.275304, 1305031102.375304} {
		if got := mapio.Seconds(frames[i].Stamp); math.Abs(got-want) > 1e-6 {
			t.Errorf("frame %d at %.6f, want %.6f", i, got, want)
		}
	}

	// EuRoC-style nanosecond names.
	dir2 := t.TempDir()
	writePNG(t, filepath.Join(dir2, "1403636579763555584.png"), img)
	writePNG(t, filepath.Join(dir2, "1403636579813555456.png"), img)
	src, err = OpenFolder(dir2, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	frames = readAll(t, src)
	if d := mapio.Seconds(frames[1].Stamp) - mapio.Seconds(frames[0].Stamp); math.Abs(d-0.05) > 1e-6 {
		t.Errorf("EuRoC stamps %v apart, want 50 ms", d)
	}
}

func TestFolderErrors(t *testing.T) {
	empty := t.TempDir()
	if _, err := OpenFolder(empty, DefaultOptions()); err == nil || !strings.Contains(err.Error(), "no .png, .jpg or .JPG files") {
		t.Errorf("empty folder: %v", err)
	}
	if _, err := Open(context.Background(), filepath.Join(empty, "missing"), DefaultOptions()); err == nil {
		t.Error("missing path accepted")
	}
	bad := DefaultOptions()
	bad.Stride = 0
	if _, err := OpenFolder(empty, bad); err == nil || !strings.Contains(err.Error(), "'stride'") {
		t.Errorf("stride 0: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "0.png"), []byte("not a png"), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := OpenFolder(dir, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	// An undecodable image is skipped and counted, not the end of the input.
	if _, err := src.Next(context.Background()); !errors.Is(err, io.EOF) {
		t.Errorf("corrupt image: %v, want it skipped", err)
	}
	if n, err := src.Skipped(); n != 1 || err == nil || !strings.Contains(err.Error(), "want PNG or JPEG") {
		t.Errorf("corrupt image: skipped %d, %v", n, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := src.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// requireFFmpeg fails (not skips) without ffmpeg: CI installs it.
func requireFFmpeg(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"ffmpeg", "ffprobe"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed for the video tests: apt-get install ffmpeg", tool)
		}
	}
}

// pattern is frame k of a synthetic clip: every pixel differs by frame.
func pattern(k, w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.SetRGBA(x, y, color.RGBA{uint8(x*7 + k*13), uint8(y*5 + k*29), uint8((x + y + k) * 3), 255})
		}
	}
	return img
}

// makeVideo encodes frames losslessly (FFV1, RGB) at 25 fps.
func makeVideo(t *testing.T, n, w, h int) string {
	t.Helper()
	dir := t.TempDir()
	for k := range n {
		writePNG(t, filepath.Join(dir, fmt.Sprintf("%03d.png", k)), pattern(k, w, h))
	}
	out := filepath.Join(dir, "clip.mkv")
	cmd := exec.Command("ffmpeg", "-nostdin", "-v", "error", "-framerate", "25", "-i", filepath.Join(dir, "%03d.png"),
		"-c:v", "ffv1", "-pix_fmt", "bgr0", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("encode test video: %v: %s", err, b)
	}
	return out
}

func TestVideoExactFrames(t *testing.T) {
	requireFFmpeg(t)
	const n, w, h = 12, 48, 32
	path := makeVideo(t, n, w, h)
	all := DefaultOptions()
	all.SampleFPS = 0 // every frame
	src, err := Open(context.Background(), path, all)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	frames := readAll(t, src)
	if len(frames) != n {
		t.Fatalf("decoded %d frames, want %d", len(frames), n)
	}
	for k, f := range frames {
		want := pattern(k, w, h)
		got, ok := f.Image.(*image.RGBA)
		if !ok || got.Bounds() != want.Bounds() || string(got.Pix) != string(want.Pix) {
			t.Fatalf("frame %d differs from the encoded one", k)
		}
		if f.Seq != uint64(k) || math.Abs(mapio.Seconds(f.Stamp)-float64(k)/25) > 1e-6 {
			t.Errorf("frame %d: seq %d at %g s", k, f.Seq, mapio.Seconds(f.Stamp))
		}
	}

	// first-k 7 then stride 3: frames 0, 3, 6.
	opt := all
	opt.FirstK, opt.Stride = 7, 3
	src2, err := OpenVideo(context.Background(), path, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer src2.Close()
	frames = readAll(t, src2)
	if len(frames) != 3 {
		t.Fatalf("first-k 7 stride 3: %d frames", len(frames))
	}
	for i, f := range frames {
		if f.Seq != uint64(3*i) || string(f.Image.(*image.RGBA).Pix) != string(pattern(3*i, w, h).Pix) {
			t.Errorf("selected frame %d is not input frame %d", i, 3*i)
		}
	}

	// The default --fps 10 on a 25 fps video samples every round(2.5) = 2nd
	// frame (Python's rounding, as the reference); first-k 4 and stride 2
	// then count sampled frames: sampled 0, 2, 4, 6 → input frames 0 and 4.
	for _, c := range []struct {
		sample       float64
		firstK, step int
		want         []uint64
	}{
		{10, 0, 1, []uint64{0, 2, 4, 6, 8, 10}},
		{10, 4, 2, []uint64{0, 4}},
		{5, 0, 1, []uint64{0, 5, 10}},
		{100, 0, 4, []uint64{0, 4, 8}},
	} {
		opt := DefaultOptions()
		opt.SampleFPS, opt.FirstK, opt.Stride = c.sample, c.firstK, c.step
		src, err := OpenVideo(context.Background(), path, opt)
		if err != nil {
			t.Fatal(err)
		}
		frames := readAll(t, src)
		src.Close()
		var seqs []uint64
		for _, f := range frames {
			seqs = append(seqs, f.Seq)
			if math.Abs(mapio.Seconds(f.Stamp)-float64(f.Seq)/25) > 1e-6 {
				t.Errorf("frame %d stamped %g s", f.Seq, mapio.Seconds(f.Stamp))
			}
		}
		if fmt.Sprint(seqs) != fmt.Sprint(c.want) {
			t.Errorf("--fps %g --first-k %d --stride %d: frames %v, want %v", c.sample, c.firstK, c.step, seqs, c.want)
		}
	}
}

func TestVideoErrors(t *testing.T) {
	requireFFmpeg(t)
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.mp4")
	if err := os.WriteFile(junk, []byte("this is not a video"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenVideo(context.Background(), junk, DefaultOptions()); err == nil || !strings.Contains(err.Error(), "ffprobe cannot read it") {
		t.Errorf("junk file: %v", err)
	}

	// Cancelling stops the decoder promptly.
	path := makeVideo(t, 30, 32, 32)
	ctx, cancel := context.WithCancel(context.Background())
	src, err := OpenVideo(ctx, path, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Next(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := src.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("after cancel: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- src.Close() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return after cancel")
	}

	// Without ffmpeg on PATH the message says what to do.
	t.Setenv("PATH", t.TempDir())
	if _, err := OpenVideo(context.Background(), path, DefaultOptions()); !errors.Is(err, ErrNoFFmpeg) ||
		err.Error() != "ffmpeg not found on PATH: install it (apt-get install ffmpeg) or extract frames to a folder" {
		t.Errorf("no ffmpeg: %v", err)
	}
}
