package source

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/draw"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"

	"github.com/lingbotmap/lingbotmap/internal/shared"
	"github.com/lingbotmap/lingbotmap/msgs/bag"
)

// realFrames loads the first n courthouse images as RGBA.
func realFrames(t *testing.T, n int) []*image.RGBA {
	t.Helper()
	dir, err := shared.Path("data", "courthouse")
	if err != nil {
		t.Fatal(err)
	}
	var out []*image.RGBA
	for i := range n {
		f, err := os.Open(filepath.Join(dir, fmt.Sprintf("%06d.png", i)))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		rgba := image.NewRGBA(img.Bounds())
		draw.Draw(rgba, rgba.Bounds(), img, image.Point{}, draw.Src)
		out = append(out, rgba)
	}
	return out
}

func rawImage(img *image.RGBA, stamp time.Time) *sensor_msgs.Image {
	b := img.Bounds()
	data := make([]byte, 0, 3*b.Dx()*b.Dy())
	for i := 0; i < len(img.Pix); i += 4 {
		data = append(data, img.Pix[i], img.Pix[i+1], img.Pix[i+2])
	}
	return &sensor_msgs.Image{
		Header: std_msgs.Header{Stamp: stamp, FrameId: "camera"},
		Height: uint32(b.Dy()), Width: uint32(b.Dx()), Encoding: "rgb8", Step: uint32(3 * b.Dx()), Data: data,
	}
}

// writeTestBag stores the frames twice, raw and as PNG, with a corrupt raw
// message after frame 2 and a non-image topic.
func writeTestBag(t *testing.T, frames []*image.RGBA) (string, []time.Time) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cam.bag")
	w, err := bag.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	var stamps []time.Time
	for i, img := range frames {
		stamp := time.Unix(1700000000, 0).Add(time.Duration(i) * 100 * time.Millisecond)
		stamps = append(stamps, stamp)
		rec := stamp.Add(5 * time.Millisecond)
		if err := w.Write("/cam/image_raw", rec, rawImage(img, stamp)); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := png.Encode(&buf, img); err != nil {
			t.Fatal(err)
		}
		if err := w.Write("/cam/image/compressed", rec, &sensor_msgs.CompressedImage{
			Header: std_msgs.Header{Stamp: stamp}, Format: "png", Data: buf.Bytes(),
		}); err != nil {
			t.Fatal(err)
		}
		if err := w.Write("/note", rec, &std_msgs.String{Data: "hello"}); err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			bad := rawImage(img, stamp)
			bad.Data = bad.Data[:10]
			if err := w.Write("/cam/image_raw", rec, bad); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path, stamps
}

func TestBagSource(t *testing.T) {
	frames := realFrames(t, 5)
	path, stamps := writeTestBag(t, frames)

	for _, topic := range []string{"/cam/image_raw", "/cam/image/compressed"} {
		opt := DefaultOptions()
		opt.Topic = topic
		src, err := Open(context.Background(), path, opt)
		if err != nil {
			t.Fatal(err)
		}
		got := readAll(t, src)
		b := src.(*Bag)
		wantLen := 5
		if topic == "/cam/image_raw" {
			wantLen = 6 // the index counts the corrupt message too
		}
		if src.Len() != wantLen || len(got) != 5 {
			t.Fatalf("%s: Len %d, read %d", topic, src.Len(), len(got))
		}
		for i, f := range got {
			img, ok := f.Image.(*image.RGBA)
			if !ok || !bytes.Equal(img.Pix, frames[i].Pix) {
				t.Fatalf("%s: frame %d differs from the image written", topic, i)
			}
			if !f.Stamp.Equal(stamps[i]) {
				t.Errorf("%s: frame %d stamped %v, want the header stamp %v", topic, i, f.Stamp, stamps[i])
			}
		}
		n, err := b.Skipped()
		if topic == "/cam/image_raw" && (n != 1 || err == nil || !strings.Contains(err.Error(), "message 3 on /cam/image_raw")) {
			t.Errorf("skipped %d (%v), want the corrupt message 3", n, err)
		}
		if topic != "/cam/image_raw" && n != 0 {
			t.Errorf("%s: skipped %d", topic, n)
		}
		if err := src.Close(); err != nil {
			t.Error(err)
		}
	}

	// first-k 4, stride 2 of the compressed topic: messages 0 and 2.
	opt := DefaultOptions()
	opt.Topic, opt.FirstK, opt.Stride = "/cam/image/compressed", 4, 2
	src, err := OpenBag(path, opt)
	if err != nil {
		t.Fatal(err)
	}
	got := readAll(t, src)
	if src.Len() != 2 || len(got) != 2 || got[1].Seq != 2 || !got[1].Stamp.Equal(stamps[2]) {
		t.Errorf("first-k 4 stride 2: Len %d, %d frames", src.Len(), len(got))
	}
	src.Close()
}

func TestBagSourceErrors(t *testing.T) {
	path, _ := writeTestBag(t, realFrames(t, 1))
	cases := []struct{ topic, want string }{
		{"", "several image topics (/cam/image/compressed, /cam/image_raw): choose one with --topic"},
		{"/missing", `no topic "/missing"`},
		{"/note", "carries std_msgs/String"},
	}
	for _, c := range cases {
		opt := DefaultOptions()
		opt.Topic = c.topic
		if _, err := OpenBag(path, opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("topic %q: %v, want %q", c.topic, err, c.want)
		}
	}
	junk := filepath.Join(t.TempDir(), "junk.bag")
	if err := os.WriteFile(junk, []byte("#ROSBAG V1.2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), junk, DefaultOptions()); err == nil {
		t.Error("junk bag accepted")
	}
}
