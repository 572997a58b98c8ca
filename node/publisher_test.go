package node_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/nav_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/tf2_msgs"
)

// Each result is published with its own input message's header: frames
// from cameras named apart keep their names on their depth images and TF,
// those held for phase 1 included (the pipeline carries the header; there
// is no side table to lose it).
func TestPublisherKeepsEachFramesHeader(t *testing.T) {
	ref := goldenReplay(t)
	w, h := ref.Size()
	c := startCore(t, fastConfig(t), goldenReplay(t), nil, "/image")
	const n = 12
	for i := range n {
		if err := c.tr.Deliver("/image", frame(i, w, h, fmt.Sprintf("cam%d", i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "12 depth images and odometry", 10*time.Second, func() bool {
		return len(c.tr.Messages("/lbm/depth")) == n && len(c.tr.Messages("/lbm/odom")) == n
	})
	depths, odoms, tfs := c.tr.Messages("/lbm/depth"), c.tr.Messages("/lbm/odom"), c.tr.Messages("/tf")
	for i := range n {
		want := fmt.Sprintf("cam%d", i)
		d := depths[i].(*sensor_msgs.Image)
		o := odoms[i].(*nav_msgs.Odometry)
		tf := tfs[i].(*tf2_msgs.TFMessage).Transforms[0]
		if d.Header.FrameId != want || !d.Header.Stamp.Equal(stampOf(i)) || o.ChildFrameId != want || tf.ChildFrameId != want {
			t.Errorf("frame %d: depth in %q at %v, odometry of %q, TF to %q; want %q at %v", i, d.Header.FrameId, d.Header.Stamp, o.ChildFrameId, tf.ChildFrameId, want, stampOf(i))
		}
	}
}
