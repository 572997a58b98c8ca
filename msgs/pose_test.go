package msgs

import (
	"testing"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
)

// Pose, Transform and PoseParts put x, y, z, w where ROS expects them.
func TestPoseFieldOrder(t *testing.T) {
	tr, q := [3]float64{1, 2, 3}, [4]float64{0.1, 0.2, 0.3, 0.9}
	p := Pose(tr, q)
	want := geometry_msgs.Pose{
		Position:    geometry_msgs.Point{X: 1, Y: 2, Z: 3},
		Orientation: geometry_msgs.Quaternion{X: 0.1, Y: 0.2, Z: 0.3, W: 0.9},
	}
	if p != want {
		t.Fatalf("Pose = %+v, want %+v", p, want)
	}
	if tf := Transform(tr, q); tf.Translation != (geometry_msgs.Vector3{X: 1, Y: 2, Z: 3}) || tf.Rotation != want.Orientation {
		t.Fatalf("Transform = %+v", tf)
	}
	if gt, gq := PoseParts(p); gt != tr || gq != q {
		t.Fatalf("PoseParts = %v %v", gt, gq)
	}
	// A message's quaternion comes back as it was, unnormalised: judging it is geom's job.
	if _, gq := PoseParts(geometry_msgs.Pose{}); gq != [4]float64{} {
		t.Fatalf("zero quaternion came back as %v", gq)
	}
}
