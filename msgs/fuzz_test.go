package msgs

import (
	"bytes"
	"errors"
	"image/png"
	"testing"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/protocommon"
)

// Every decoder of outside bytes must return points/pixels or a *DecodeError
// on any input, never panic. Run longer with e.g.
// go test ./msgs -run '^$' -fuzz FuzzDecodeImage -fuzztime 30s

func requireDecodeError(t *testing.T, err error) {
	t.Helper()
	var de *DecodeError
	if err != nil && !errors.As(err, &de) {
		t.Fatalf("error %v is not a *DecodeError", err)
	}
}

func FuzzDecodeImage(f *testing.F) {
	for _, enc := range []string{"rgb8", "bgra8", "mono16"} {
		m := buildImage(f, enc, 3, 2, 1, enc == "mono16")
		f.Add(m.Encoding, m.Width, m.Height, m.Step, m.IsBigendian, m.Data)
	}
	f.Add("rgb8", uint32(1<<31), uint32(1<<31), uint32(0xFFFFFFFF), uint8(7), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, enc string, w, h, step uint32, be uint8, data []byte) {
		m := &sensor_msgs.Image{Encoding: enc, Width: w, Height: h, Step: step, IsBigendian: be, Data: data}
		img, err := DecodeImage(m)
		requireDecodeError(t, err)
		if err == nil && (img.Rect.Dx() != int(w) || img.Rect.Dy() != int(h)) {
			t.Fatalf("decoded %v for a %dx%d message", img.Rect, w, h)
		}
	})
}

func FuzzDecodeCompressed(f *testing.F) {
	var buf bytes.Buffer
	if err := png.Encode(&buf, patternNRGBA(4, 3)); err != nil {
		f.Fatal(err)
	}
	f.Add("png", buf.Bytes())
	f.Add("rgb8; jpeg compressed bgr8", []byte{0xFF, 0xD8, 0xFF, 0xE0, 0, 16, 'J', 'F', 'I', 'F', 0})
	f.Add("", []byte{})
	f.Fuzz(func(t *testing.T, format string, data []byte) {
		_, err := DecodeCompressed(&sensor_msgs.CompressedImage{Format: format, Data: data})
		requireDecodeError(t, err)
	})
}

// The point cloud fuzzer starts from wire bytes, as the node receives them.
func FuzzParsePointCloud2(f *testing.F) {
	var buf bytes.Buffer
	pc := PointCloud2(std_msgs.Header{FrameId: "map"}, []PointXYZRGB{{1, 2, 3, 4, 5, 6}, {-1, 0, 9, 0, 0, 255}})
	if err := protocommon.MessageEncode(&buf, pc); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, wire []byte) {
		var pc sensor_msgs.PointCloud2
		if err := protocommon.MessageDecode(bytes.NewReader(wire), &pc); err != nil {
			return
		}
		pts, err := ParsePointCloud2(&pc)
		requireDecodeError(t, err)
		if err == nil && uint64(len(pts)) != uint64(pc.Width)*uint64(pc.Height) {
			t.Fatalf("%d points from a %dx%d cloud", len(pts), pc.Width, pc.Height)
		}
	})
}

func FuzzCameraInfo(f *testing.F) {
	var buf bytes.Buffer
	ci := calibrated()
	ci.Roi = sensor_msgs.RegionOfInterest{XOffset: 3, Width: 100, Height: 100}
	ci.BinningX = 2
	if err := protocommon.MessageEncode(&buf, ci); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, wire []byte) {
		var ci sensor_msgs.CameraInfo
		if err := protocommon.MessageDecode(bytes.NewReader(wire), &ci); err != nil {
			return
		}
		fx, fy, _, _, w, h, err := CameraInfoK(&ci)
		requireDecodeError(t, err)
		if err == nil && (!(fx > 0) || !(fy > 0) || w <= 0 || h <= 0) {
			t.Fatalf("accepted fx=%v fy=%v %dx%d", fx, fy, w, h)
		}
	})
}
