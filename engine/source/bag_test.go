package source

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/draw"
	"image/png"
	"os"
	"os/exec"
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

// testImage is one frame as the test bags store it: a raw and a PNG image
// message stamped stamp, recorded at rec.
type testImage struct {
	stamp, rec time.Time
	raw        *sensor_msgs.Image
	png        *sensor_msgs.CompressedImage
}

// testImages makes the test bags' messages: frame i stamped 100 ms after
// frame i-1, recorded 5 ms after its stamp so that a source that used the
// record time would be caught.
func testImages(t *testing.T, frames []*image.RGBA) []testImage {
	t.Helper()
	var out []testImage
	for i, img := range frames {
		stamp := time.Unix(1700000000, 0).Add(time.Duration(i) * 100 * time.Millisecond)
		var buf bytes.Buffer
		if err := png.Encode(&buf, img); err != nil {
			t.Fatal(err)
		}
		out = append(out, testImage{
			stamp: stamp,
			rec:   stamp.Add(5 * time.Millisecond),
			raw:   rawImage(img, stamp),
			png:   &sensor_msgs.CompressedImage{Header: std_msgs.Header{Stamp: stamp}, Format: "png", Data: buf.Bytes()},
		})
	}
	return out
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
	for i, m := range testImages(t, frames) {
		stamps = append(stamps, m.stamp)
		if err := w.Write("/cam/image_raw", m.rec, m.raw); err != nil {
			t.Fatal(err)
		}
		if err := w.Write("/cam/image/compressed", m.rec, m.png); err != nil {
			t.Fatal(err)
		}
		if err := w.Write("/note", m.rec, &std_msgs.String{Data: "hello"}); err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			bad := *m.raw
			bad.Data = bad.Data[:10]
			if err := w.Write("/cam/image_raw", m.rec, &bad); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path, stamps
}

// checkTestBag reads both image topics of a bag written by writeTestBag or
// writeTestMCAP: every frame comes back with its pixels and header stamp,
// Len counts the raw topic's corrupt message too, and that message alone is
// skipped, for a reason skipErr accepts. Describe must mention kind.
func checkTestBag(t *testing.T, path, kind string, frames []*image.RGBA, stamps []time.Time, skipErr func(error) bool) {
	t.Helper()
	for _, topic := range []string{"/cam/image_raw", "/cam/image/compressed"} {
		opt := DefaultOptions()
		opt.Topic = topic
		src, err := Open(context.Background(), path, opt)
		if err != nil {
			t.Fatal(err)
		}
		got := readAll(t, src)
		wantLen, wantSkipped := len(frames), 0
		if topic == "/cam/image_raw" {
			wantLen, wantSkipped = len(frames)+1, 1 // the index (MCAP: summary) counts the corrupt message too
		}
		if src.Len() != wantLen || len(got) != len(frames) || !strings.Contains(src.Describe(), kind) {
			t.Fatalf("%s: Len %d, read %d, Describe %q", topic, src.Len(), len(got), src.Describe())
		}
		for i, f := range got {
			img, ok := f.Image.(*image.RGBA)
			if !ok || !bytes.Equal(img.Pix, frames[i].Pix) || f.Width != frames[i].Rect.Dx() || f.Height != frames[i].Rect.Dy() {
				t.Fatalf("%s: frame %d differs from the image written", topic, i)
			}
			if !f.Stamp.Equal(stamps[i]) {
				t.Errorf("%s: frame %d stamped %v, want the header stamp %v", topic, i, f.Stamp, stamps[i])
			}
		}
		n, first := src.(interface{ Skipped() (int, error) }).Skipped()
		if n != wantSkipped || n > 0 && !skipErr(first) {
			t.Errorf("%s: skipped %d (%v), want %d", topic, n, first, wantSkipped)
		}
		if err := src.Close(); err != nil {
			t.Error(err)
		}
	}
}

// checkTopicErrors wants open to refuse path for each topic (keys) with an
// error that says the value.
func checkTopicErrors(t *testing.T, open func(string, Options) (Source, error), path string, cases map[string]string) {
	t.Helper()
	for topic, want := range cases {
		opt := DefaultOptions()
		opt.Topic = topic
		if _, err := open(path, opt); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("topic %q: %v, want %q", topic, err, want)
		}
	}
}

func TestBagSource(t *testing.T) {
	frames := realFrames(t, 5)
	path, stamps := writeTestBag(t, frames)
	checkTestBag(t, path, "ROS bag", frames, stamps, func(err error) bool {
		return strings.Contains(err.Error(), "message 3 on /cam/image_raw")
	})

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
	checkTopicErrors(t, OpenBag, path, map[string]string{
		"":         "several image topics (/cam/image/compressed, /cam/image_raw): choose one with --topic",
		"/missing": `no topic "/missing"`,
		"/note":    "carries std_msgs/String",
	})
	junk := filepath.Join(t.TempDir(), "junk.bag")
	if err := os.WriteFile(junk, []byte("#ROSBAG V1.2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), junk, DefaultOptions()); err == nil {
		t.Error("junk bag accepted")
	}
}

// pyBagScript writes frames with Debian's Python rosbag (bz2 chunks, as
// `rosbag record -j` does): raw bgr8 on /cam/raw and PNG on /cam/png.
const pyBagScript = `
import io, sys, rosbag, rospy
from sensor_msgs.msg import Image, CompressedImage
from PIL import Image as PILImage
W, H = 20, 12
def rgb(x, y, k):
    return ((x + y + k) % 256, (5 * y + k) % 256, (7 * x + k) % 256)
with rosbag.Bag(sys.argv[1], 'w', compression='bz2') as bag:
    for k in range(4):
        t = rospy.Time(1600000000 + k, 250000000)
        m = Image()
        m.header.stamp = t
        m.header.frame_id = 'cam'
        m.width, m.height, m.encoding, m.step = W, H, 'bgr8', 3 * W
        data = bytearray()
        for y in range(H):
            for x in range(W):
                r, g, b = rgb(x, y, k)
                data += bytes([b, g, r])
        m.data = bytes(data)
        bag.write('/cam/raw', m, t)
        im = PILImage.new('RGB', (W, H))
        im.putdata([rgb(x, y, k) for y in range(H) for x in range(W)])
        buf = io.BytesIO()
        im.save(buf, format='PNG')
        c = CompressedImage()
        c.header.stamp = t
        c.format = 'rgb8; png compressed rgb8'
        c.data = buf.getvalue()
        bag.write('/cam/png', c, t)
`

// A bag written by the real ROS tools reads frame for frame.
func TestBagFromPythonRosbag(t *testing.T) {
	const python = "/usr/bin/python3"
	if out, err := exec.Command(python, "-c", "import rosbag, rospy, sensor_msgs.msg, PIL").CombinedOutput(); err != nil {
		t.Fatalf("Debian's python3 cannot import rosbag and PIL (%v: %s): apt-get install python3-rosbag python3-sensor-msgs python3-pil (test/install-deps.sh)", err, bytes.TrimSpace(out))
	}
	path := filepath.Join(t.TempDir(), "py.bag")
	if out, err := exec.Command(python, "-c", pyBagScript, path).CombinedOutput(); err != nil {
		t.Fatalf("python rosbag: %v\n%s", err, out)
	}
	for _, topic := range []string{"/cam/raw", "/cam/png"} {
		opt := DefaultOptions()
		opt.Topic = topic
		src, err := OpenBag(path, opt)
		if err != nil {
			t.Fatal(err)
		}
		frames := readAll(t, src)
		src.Close()
		if len(frames) != 4 || src.Len() != 4 {
			t.Fatalf("%s: %d frames, Len %d", topic, len(frames), src.Len())
		}
		for k, f := range frames {
			if want := time.Unix(1600000000+int64(k), 250000000); !f.Stamp.Equal(want) {
				t.Errorf("%s frame %d stamped %v, want %v", topic, k, f.Stamp, want)
			}
			img := f.Image.(*image.RGBA)
			for _, p := range []image.Point{{0, 0}, {19, 0}, {7, 11}, {19, 11}} {
				x, y := p.X, p.Y
				want := [3]uint8{uint8(x + y + k), uint8(5*y + k), uint8(7*x + k)}
				o := img.PixOffset(x, y)
				if got := [3]uint8{img.Pix[o], img.Pix[o+1], img.Pix[o+2]}; got != want {
					t.Errorf("%s frame %d pixel %v = %v, want %v", topic, k, p, got, want)
				}
			}
		}
	}
}
