package msgs

import (
	"errors"
	"math"
	"testing"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"
)

func TestDecodeDepth(t *testing.T) {
	// 16UC1 millimetres, little and big endian
	le := &sensor_msgs.Image{Width: 2, Height: 1, Encoding: "16UC1", Step: 4, Data: []byte{0xd0, 0x07, 0, 0}}
	be := &sensor_msgs.Image{Width: 2, Height: 1, Encoding: "16UC1", IsBigendian: 1, Step: 4, Data: []byte{0x07, 0xd0, 0, 0}}
	for _, m := range []*sensor_msgs.Image{le, be} {
		w, h, d, err := DecodeDepth(m)
		if err != nil || w != 2 || h != 1 || d[0] != 2 || d[1] != 0 {
			t.Errorf("%+v: %d×%d %v %v", m, w, h, d, err)
		}
	}
	// 32FC1 metres, as DepthImage writes it
	src := []float32{1.25, float32(math.NaN()), 0, 7}
	w, h, d, err := DecodeDepth(DepthImage(std_msgs.Header{}, 2, 2, src))
	if err != nil || w != 2 || h != 2 || d[0] != 1.25 || !math.IsNaN(float64(d[1])) || d[3] != 7 {
		t.Errorf("32FC1: %d×%d %v %v", w, h, d, err)
	}
	var de *DecodeError
	if _, _, _, err := DecodeDepth(&sensor_msgs.Image{Width: 1, Height: 1, Encoding: "rgb8", Step: 3, Data: make([]byte, 3)}); !errors.As(err, &de) || de.Kind != KindEncoding {
		t.Errorf("rgb8 as depth: %v", err)
	}
	if _, _, _, err := DecodeDepth(&sensor_msgs.Image{Width: 2, Height: 2, Encoding: "32FC1", Step: 8, Data: make([]byte, 8)}); !errors.As(err, &de) || de.Kind != KindSize {
		t.Errorf("short 32FC1: %v", err)
	}
}
