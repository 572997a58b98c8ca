package msgs

import (
	"encoding/binary"
	"errors"
	"image"
	"math"
	"testing"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"
)

// testPixel gives every pixel of a test image a distinct, known colour.
func testPixel(x, y int) (r, g, b, a uint8) {
	return uint8(10*x + y), uint8(200 - 7*y), uint8(3*x*y + 1), uint8(60 + 50*x)
}

// buildImage writes the test pattern by hand in the given encoding, with pad
// extra bytes at the end of each row. 16-bit samples get a distinctive low
// byte so that reading the wrong byte shows.
func buildImage(t testing.TB, enc string, w, h, pad int, bigEndian bool) *sensor_msgs.Image {
	t.Helper()
	type chans struct {
		order []byte // letters r g b a y in memory order
		depth int
	}
	spec := map[string]chans{
		"rgb8": {[]byte("rgb"), 1}, "bgr8": {[]byte("bgr"), 1}, "rgba8": {[]byte("rgba"), 1},
		"bgra8": {[]byte("bgra"), 1}, "mono8": {[]byte("y"), 1}, "rgb16": {[]byte("rgb"), 2},
		"bgr16": {[]byte("bgr"), 2}, "rgba16": {[]byte("rgba"), 2}, "bgra16": {[]byte("bgra"), 2},
		"mono16": {[]byte("y"), 2},
	}[enc]
	step := w*len(spec.order)*spec.depth + pad
	data := make([]byte, step*h)
	for y := range h {
		for x := range w {
			r, g, b, a := testPixel(x, y)
			for c, letter := range spec.order {
				v := map[byte]uint8{'r': r, 'g': g, 'b': b, 'a': a, 'y': r}[letter]
				o := y*step + (x*len(spec.order)+c)*spec.depth
				if spec.depth == 1 {
					data[o] = v
					continue
				}
				word := uint16(v)<<8 | 0x5A
				if bigEndian {
					binary.BigEndian.PutUint16(data[o:], word)
				} else {
					binary.LittleEndian.PutUint16(data[o:], word)
				}
			}
		}
	}
	m := &sensor_msgs.Image{Height: uint32(h), Width: uint32(w), Encoding: enc, Step: uint32(step), Data: data}
	if bigEndian {
		m.IsBigendian = 1
	}
	return m
}

func TestDecodeImageEncodings(t *testing.T) {
	const w, h = 7, 5
	for _, enc := range []string{"rgb8", "bgr8", "rgba8", "bgra8", "mono8", "rgb16", "bgr16", "rgba16", "bgra16", "mono16"} {
		for _, pad := range []int{0, 3} {
			for _, be := range []bool{false, true} {
				m := buildImage(t, enc, w, h, pad, be)
				img, err := DecodeImage(m)
				if err != nil {
					t.Fatalf("%s pad %d bigendian %v: %v", enc, pad, be, err)
				}
				if img.Rect != image.Rect(0, 0, w, h) {
					t.Fatalf("%s: bounds %v, want %dx%d", enc, img.Rect, w, h)
				}
				alpha := enc[3] == 'a' || enc[:4] == "bgra"
				mono := enc[:4] == "mono"
				for y := range h {
					for x := range w {
						r, g, b, a := testPixel(x, y)
						if mono {
							g, b = r, r
						}
						if !alpha {
							a = 255
						}
						want := [4]uint8{premul(r, a), premul(g, a), premul(b, a), a}
						o := img.PixOffset(x, y)
						got := [4]uint8(img.Pix[o : o+4])
						if got != want {
							t.Fatalf("%s pad %d be %v: pixel (%d,%d) = %v, want %v", enc, pad, be, x, y, got, want)
						}
					}
				}
			}
		}
	}
}

func TestDecodeImageErrors(t *testing.T) {
	good := func() *sensor_msgs.Image { return buildImage(t, "rgb8", 4, 3, 0, false) }
	cases := []struct {
		name string
		edit func(m *sensor_msgs.Image)
		kind string
	}{
		{"unknown encoding", func(m *sensor_msgs.Image) { m.Encoding = "yuv422" }, KindEncoding},
		{"depth encoding", func(m *sensor_msgs.Image) { m.Encoding = "32FC1" }, KindEncoding},
		{"empty encoding", func(m *sensor_msgs.Image) { m.Encoding = "" }, KindEncoding},
		{"step too short", func(m *sensor_msgs.Image) { m.Step = 11; m.Data = m.Data[:33] }, KindStep},
		{"data too short", func(m *sensor_msgs.Image) { m.Data = m.Data[:len(m.Data)-1] }, KindSize},
		{"data too long", func(m *sensor_msgs.Image) { m.Data = append(m.Data, 0) }, KindSize},
		{"bad is_bigendian", func(m *sensor_msgs.Image) { m.IsBigendian = 2 }, KindFormat},
		{"zero width", func(m *sensor_msgs.Image) { m.Width = 0 }, KindSize},
		{"zero height", func(m *sensor_msgs.Image) { m.Height = 0 }, KindSize},
		{"huge", func(m *sensor_msgs.Image) { m.Width, m.Height, m.Step = 1<<20, 1<<20, 3<<20 }, KindSize},
	}
	for _, c := range cases {
		m := good()
		c.edit(m)
		_, err := DecodeImage(m)
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Fatalf("%s: got %v, want a *DecodeError", c.name, err)
		}
		if de.Kind != c.kind {
			t.Errorf("%s: kind %q (%v), want %q", c.name, de.Kind, err, c.kind)
		}
	}
	if _, err := DecodeImage(nil); err == nil {
		t.Error("nil image: no error")
	}
}

func TestDepthImage(t *testing.T) {
	hdr := std_msgs.Header{Seq: 4, FrameId: "cam"}
	depth := []float32{0.5, 1, 2, 3.25, 4, 100}
	m := DepthImage(hdr, 3, 2, depth)
	if m.Encoding != "32FC1" || m.Width != 3 || m.Height != 2 || m.Step != 12 || m.IsBigendian != 0 || len(m.Data) != 24 || m.Header != hdr {
		t.Fatalf("unexpected depth image %+v", m)
	}
	for i, want := range depth {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(m.Data[4*i:])); got != want {
			t.Errorf("depth[%d] = %v, want %v", i, got, want)
		}
	}
	short := DepthImage(hdr, 2, 2, []float32{1})
	if v := math.Float32frombits(binary.LittleEndian.Uint32(short.Data[12:])); !math.IsNaN(float64(v)) {
		t.Errorf("missing depth encoded as %v, want NaN", v)
	}
	if e := DepthImage(hdr, -3, 2, nil); e.Width != 0 || e.Height != 0 || len(e.Data) != 0 {
		t.Errorf("negative width gave %dx%d with %d bytes", e.Width, e.Height, len(e.Data))
	}
}
