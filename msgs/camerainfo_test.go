package msgs

import (
	"errors"
	"math"
	"testing"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
)

func calibrated() *sensor_msgs.CameraInfo {
	return &sensor_msgs.CameraInfo{
		Width: 640, Height: 480, DistortionModel: "plumb_bob",
		K: [9]float64{500, 0, 320.5, 0, 510, 240.25, 0, 0, 1},
	}
}

func TestCameraInfoK(t *testing.T) {
	fx, fy, cx, cy, w, h, err := CameraInfoK(calibrated())
	if err != nil || fx != 500 || fy != 510 || cx != 320.5 || cy != 240.25 || w != 640 || h != 480 {
		t.Fatalf("got %v %v %v %v %dx%d %v", fx, fy, cx, cy, w, h, err)
	}
	// Region of interest, then 2×2 binning, as image_geometry applies them.
	ci := calibrated()
	ci.Roi = sensor_msgs.RegionOfInterest{XOffset: 100, YOffset: 40, Width: 400, Height: 300}
	ci.BinningX, ci.BinningY = 2, 2
	fx, fy, cx, cy, w, h, err = CameraInfoK(ci)
	if err != nil || fx != 250 || fy != 255 || cx != 110.25 || cy != 100.125 || w != 200 || h != 150 {
		t.Fatalf("roi+binning: got %v %v %v %v %dx%d %v", fx, fy, cx, cy, w, h, err)
	}
}

func TestCameraInfoKErrors(t *testing.T) {
	cases := []struct {
		name string
		edit func(ci *sensor_msgs.CameraInfo)
		kind string
	}{
		{"uncalibrated", func(ci *sensor_msgs.CameraInfo) { ci.K = [9]float64{} }, KindFormat},
		{"negative fx", func(ci *sensor_msgs.CameraInfo) { ci.K[0] = -500 }, KindFormat},
		{"nan cy", func(ci *sensor_msgs.CameraInfo) { ci.K[5] = math.NaN() }, KindFormat},
		{"not homogeneous", func(ci *sensor_msgs.CameraInfo) { ci.K[8] = 0 }, KindFormat},
		{"zero width", func(ci *sensor_msgs.CameraInfo) { ci.Width = 0 }, KindSize},
		{"roi outside", func(ci *sensor_msgs.CameraInfo) {
			ci.Roi = sensor_msgs.RegionOfInterest{XOffset: 600, Width: 100, Height: 10}
		}, KindSize},
		{"binning too big", func(ci *sensor_msgs.CameraInfo) { ci.BinningY = 1000 }, KindSize},
	}
	for _, c := range cases {
		ci := calibrated()
		c.edit(ci)
		_, _, _, _, _, _, err := CameraInfoK(ci)
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Fatalf("%s: got %v, want a *DecodeError", c.name, err)
		}
		if de.Kind != c.kind {
			t.Errorf("%s: kind %q (%v), want %q", c.name, de.Kind, err, c.kind)
		}
	}
}
