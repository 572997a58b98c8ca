package cdr

import (
	"testing"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
)

// A 518×378 rgb8 camera frame, the size the node receives.
func benchImage() *sensor_msgs.Image {
	return &sensor_msgs.Image{Header: header("camera"), Height: 378, Width: 518, Encoding: "rgb8", Step: 3 * 518,
		Data: make([]byte, 3*518*378)}
}

func BenchmarkMarshalImage(b *testing.B) {
	m := benchImage()
	b.SetBytes(int64(len(m.Data)))
	for b.Loop() {
		if _, err := Marshal(m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUnmarshalImage(b *testing.B) {
	data, err := Marshal(benchImage())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	var m sensor_msgs.Image
	for b.Loop() {
		if err := Unmarshal(data, &m); err != nil {
			b.Fatal(err)
		}
	}
}
