package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/nav_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"

	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/traj"
	"github.com/lingbotmap/lingbotmap/msgs/rosbag2"
)

// Pose types eval reads from a ROS 2 bag, in the order a topic is chosen
// when none is named.
const (
	typePoseStamped = "geometry_msgs/msg/PoseStamped"
	typeOdometry    = "nav_msgs/msg/Odometry"
)

// isROS2Bag says whether eval should read path as a ROS 2 bag rather than a
// TUM file: a rosbag2 bag directory, an .mcap or a .db3 file.
func isROS2Bag(path string) bool {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return rosbag2.IsBagDir(path)
	}
	ext := strings.ToLower(filepath.Ext(path))
	return ext == ".mcap" || ext == ".db3"
}

// readTrajectory reads a TUM file, or the poses of one topic of a ROS 2 bag
// (geometry_msgs/msg/PoseStamped or nav_msgs/msg/Odometry, stamped with
// their headers): topic, or the bag's only PoseStamped topic, else its only
// Odometry topic. A bag read only in part is refused (exit 4): a trajectory
// with a hole would be judged as if whole.
func readTrajectory(path, topic string) (traj.Trajectory, error) {
	if !isROS2Bag(path) {
		return traj.ReadTUMFile(path)
	}
	b, err := rosbag2.Open(path)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	types := map[string]string{}
	var poses, odoms []string
	for _, c := range b.Channels() {
		types[c.Topic] = c.Type
		switch c.Type {
		case typePoseStamped:
			poses = append(poses, c.Topic)
		case typeOdometry:
			odoms = append(odoms, c.Topic)
		}
	}
	all := strings.Join(append(slices.Clone(poses), odoms...), ", ")
	if all == "" {
		all = "none"
	}
	switch {
	case topic != "":
		t, ok := types[topic]
		if !ok {
			return nil, &exitCodeError{code: exitUsage, err: fmt.Errorf("bag %s has no topic %s (pose topics: %s)", path, topic, all)}
		}
		if t != typePoseStamped && t != typeOdometry {
			return nil, &exitCodeError{code: exitUsage, err: fmt.Errorf("bag %s: topic %s carries %s, not PoseStamped or Odometry (pose topics: %s)", path, topic, t, all)}
		}
	case len(poses) == 1:
		topic = poses[0]
	case len(poses) == 0 && len(odoms) == 1:
		topic = odoms[0]
	case len(poses)+len(odoms) == 0:
		return nil, fmt.Errorf("bag %s has no %s or %s topic", path, typePoseStamped, typeOdometry)
	default:
		return nil, &exitCodeError{code: exitUsage, err: fmt.Errorf("bag %s has several pose topics (%s): choose one with --topic", path, all)}
	}
	var tr traj.Trajectory
	seen := map[float64]int{}
	for m, err := range b.Messages(topic) {
		if err != nil {
			return nil, err
		}
		var h std_msgs.Header
		var p geometry_msgs.Pose
		if m.Type == typeOdometry {
			var o nav_msgs.Odometry
			err = m.Decode(&o)
			h, p = o.Header, o.Pose.Pose
		} else {
			var ps geometry_msgs.PoseStamped
			err = m.Decode(&ps)
			h, p = ps.Header, ps.Pose
		}
		if err != nil {
			return nil, fmt.Errorf("bag %s: message %d on %s: %w", path, m.Sequence, topic, err)
		}
		pose, err := bagPose(h.Stamp, p)
		if err != nil {
			return nil, fmt.Errorf("bag %s: message %d on %s: %w", path, m.Sequence, topic, err)
		}
		if prev, ok := seen[pose.Time]; ok {
			return nil, fmt.Errorf("bag %s: message %d on %s repeats the stamp of message %d", path, m.Sequence, topic, prev)
		}
		seen[pose.Time] = int(m.Sequence)
		tr = append(tr, pose)
	}
	if len(tr) == 0 {
		return nil, fmt.Errorf("bag %s: no message on %s", path, topic)
	}
	slices.SortStableFunc(tr, func(a, b traj.Pose) int {
		if a.Time < b.Time {
			return -1
		}
		if a.Time > b.Time {
			return 1
		}
		return 0
	})
	return tr, nil
}

func bagPose(stamp time.Time, p geometry_msgs.Pose) (traj.Pose, error) {
	v := []float64{p.Position.X, p.Position.Y, p.Position.Z, p.Orientation.X, p.Orientation.Y, p.Orientation.Z, p.Orientation.W}
	for _, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return traj.Pose{}, errors.New("the pose is not finite")
		}
	}
	r, err := geom.QuatToMat(geom.Quat{v[3], v[4], v[5], v[6]})
	if err != nil {
		return traj.Pose{}, err
	}
	return traj.Pose{Time: float64(stamp.UnixNano()) / 1e9, T: [3]float64{v[0], v[1], v[2]}, R: r}, nil
}
