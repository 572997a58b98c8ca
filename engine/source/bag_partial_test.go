package source

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/color"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/msgs/bag"
	"github.com/lingbotmap/lingbotmap/msgs/mcapbag"
)

// readUntilError reads frames until the source ends and returns them with
// the error that ended them (nil for a clean io.EOF).
func readUntilError(t *testing.T, s Source) (int, error) {
	t.Helper()
	n := 0
	for {
		_, err := s.Next(context.Background())
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
	}
}

// A bag cut short gives the frames before the cut and then an error that
// is ErrPartial and says how much was used: not a silent clean end.
func TestCutBagIsPartial(t *testing.T) {
	frames := realFrames(t, 6)
	path, _ := writeTestBag(t, frames)
	full, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), "cut.bag")
	if err := os.WriteFile(cut, full[:len(full)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	opt := DefaultOptions()
	opt.Topic = "/cam/image/compressed"
	src, err := Open(context.Background(), cut, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	n, err := readUntilError(t, src)
	if !errors.Is(err, ErrPartial) {
		t.Fatalf("%d frames, then %v; want ErrPartial", n, err)
	}
	var pe *bag.PartialError
	if !errors.As(err, &pe) {
		t.Fatalf("%v does not wrap a *bag.PartialError", err)
	}
	if n == 0 || n >= len(frames) || pe.Size != int64(len(full)/2) || pe.Read <= 0 {
		t.Errorf("%d of %d frames, %+v", n, len(frames), *pe)
	}
	if want := "frames were used"; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "cut.bag") {
		t.Errorf("message %q lacks the path or %q", err, want)
	}
	// The whole bag ends cleanly.
	src2, err := Open(context.Background(), path, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer src2.Close()
	if n, err := readUntilError(t, src2); n != len(frames) || err != nil {
		t.Errorf("whole bag: %d frames, %v", n, err)
	}
}

// 16-bit images are reduced to 8 bits with a notice, once per kind.
// Both bag formats report, once per kind, the 16-bit images whose decoding
// keeps only the high byte of each sample.
func TestBagNoticesPrecisionLoss(t *testing.T) {
	for _, f := range []struct {
		name   string
		create func(string) (bagWriter, error)
		open   func(string, Options) (Source, error)
	}{
		{"deep.bag", func(p string) (bagWriter, error) { return bag.Create(p) }, OpenBag},
		{"deep.mcap", func(p string) (bagWriter, error) { return mcapbag.Create(p) }, OpenMCAP},
	} {
		t.Run(f.name, func(t *testing.T) { checkPrecisionNotices(t, f.name, f.create, f.open) })
	}
}

// bagWriter is what the ROS 1 and the MCAP bag writers have in common.
type bagWriter interface {
	Write(topic string, t time.Time, msg any) error
	Close() error
}

func checkPrecisionNotices(t *testing.T, name string, create func(string) (bagWriter, error), open func(string, Options) (Source, error)) {
	path := filepath.Join(t.TempDir(), name)
	w, err := create(path)
	if err != nil {
		t.Fatal(err)
	}
	const W, H = 6, 4
	g16 := image.NewGray16(image.Rect(0, 0, W, H))
	for i := range W * H {
		g16.SetGray16(i%W, i/W, color.Gray16{Y: uint16(1000 * i)})
	}
	var pngBuf bytes.Buffer
	if err := png.Encode(&pngBuf, g16); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		stamp := time.Unix(1700000000+int64(i), 0)
		mono := &sensor_msgs.Image{Header: std_msgs.Header{Stamp: stamp}, Width: W, Height: H, Encoding: "mono16", Step: 2 * W, Data: make([]byte, 2*W*H)}
		rgb := &sensor_msgs.Image{Header: std_msgs.Header{Stamp: stamp}, Width: W, Height: H, Encoding: "rgb8", Step: 3 * W, Data: make([]byte, 3*W*H)}
		for _, m := range []struct {
			topic string
			msg   any
		}{
			{"/mono16", mono}, {"/rgb8", rgb},
			{"/png16", &sensor_msgs.CompressedImage{Header: std_msgs.Header{Stamp: stamp}, Format: "png", Data: pngBuf.Bytes()}},
		} {
			if err := w.Write(m.topic, stamp, m.msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]string{
		"/mono16": "mono16 images are reduced to 8 bits per sample (the high byte of each 16-bit sample is kept) (first on message 0 of /mono16)",
		"/png16":  "16-bit grey PNG images are reduced to 8 bits (the high byte of each sample is kept) (first on message 0 of /png16)",
		"/rgb8":   "",
	} {
		opt := DefaultOptions()
		opt.Topic = topic
		src, err := open(path, opt)
		if err != nil {
			t.Fatal(err)
		}
		b := src.(interface{ Notices() []string })
		var got []string
		eachFrame(t, src, func(engine.Frame) { got = append(got, b.Notices()...) })
		src.Close()
		if want == "" && len(got) != 0 || want != "" && (len(got) != 1 || got[0] != want) {
			t.Errorf("%s: notices %q, want once %q", topic, got, want)
		}
	}
}
