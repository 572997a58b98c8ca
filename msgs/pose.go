package msgs

import "github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"

// Pose fills a geometry_msgs/Pose with a position and an XYZW quaternion,
// as engine/geom's Decompose and mapio's PathPose give them. It copies
// fields and computes nothing: the geometry lives in engine/geom, and msgs,
// a leaf, imports none of it.
func Pose(t [3]float64, q [4]float64) geometry_msgs.Pose {
	return geometry_msgs.Pose{
		Position:    geometry_msgs.Point{X: t[0], Y: t[1], Z: t[2]},
		Orientation: geometry_msgs.Quaternion{X: q[0], Y: q[1], Z: q[2], W: q[3]},
	}
}

// Transform is Pose for a geometry_msgs/Transform, the payload of TF
// messages.
func Transform(t [3]float64, q [4]float64) geometry_msgs.Transform {
	return geometry_msgs.Transform{
		Translation: geometry_msgs.Vector3{X: t[0], Y: t[1], Z: t[2]},
		Rotation:    geometry_msgs.Quaternion{X: q[0], Y: q[1], Z: q[2], W: q[3]},
	}
}

// PoseParts is the inverse of Pose: the position and the quaternion as the
// message has them (not normalised; geom.Compose checks and reads them).
func PoseParts(p geometry_msgs.Pose) (t [3]float64, q [4]float64) {
	return [3]float64{p.Position.X, p.Position.Y, p.Position.Z},
		[4]float64{p.Orientation.X, p.Orientation.Y, p.Orientation.Z, p.Orientation.W}
}
