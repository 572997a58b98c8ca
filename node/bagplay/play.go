// Package bagplay replays the camera topic of a ROS 2 bag (an MCAP or .db3
// file, or a rosbag2 bag directory of split files) through a
// node.Transport: each message is published with its recorded header stamp,
// at the recorded pace (scaled by a rate factor), as `ros2 bag play` does, so
// a replay needs no ROS 2 installation.
package bagplay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"go.yaml.in/yaml/v3"

	"github.com/lingbotmap/lingbotmap/msgs/mcapbag"
	"github.com/lingbotmap/lingbotmap/msgs/rosbag2"
	"github.com/lingbotmap/lingbotmap/node"
)

// Options tune a replay. Start from DefaultOptions.
type Options struct {
	// Topic is the bag's image topic to play (sensor_msgs/msg/Image or
	// CompressedImage). Empty picks the only image topic.
	Topic string
	// Rate scales the recorded pace: 2 plays twice as fast. It defaults to 1.
	Rate float64
	// Delay is waited after advertising and before the first message, so
	// that subscribers have discovered the publisher. It defaults to 1 s.
	Delay time.Duration
	// Linger is how long the player stays in the graph after the last
	// message before deleting its writer: a writer deleted right after a
	// write can take a sample its readers have not fully received yet with
	// it (a best-effort reader acknowledges nothing to wait for). It
	// defaults to 1 s.
	Linger time.Duration
	// Log receives progress and the first error of each kind. (optional)
	Log *slog.Logger
}

// DefaultOptions play the only image topic at its recorded pace.
func DefaultOptions() Options { return Options{Rate: 1, Delay: time.Second, Linger: time.Second} }

// Result says what a replay did.
type Result struct {
	Topic     string // the bag topic played
	Published int    // messages published
	Skipped   int    // messages that did not decode, not published
	FirstErr  error  // the first decode error
}

// Play publishes the image topic of the ROS 2 bag at path (see rosbag2.Open)
// through t (already connected), on t.Resolve(topic), until the bag ends or ctx is cancelled.
// The publisher's QoS follows the bag's recorded offered QoS: best effort
// when the recorder saw a best-effort publisher, reliable otherwise.
func Play(ctx context.Context, path string, t node.Transport, o Options) (Result, error) {
	if !(o.Rate > 0) || o.Rate > 1e6 {
		return Result{}, fmt.Errorf("'rate' must be a positive speed factor, not %g", o.Rate)
	}
	if o.Delay < 0 {
		return Result{}, fmt.Errorf("'delay' must not be negative, not %v", o.Delay)
	}
	if o.Linger < 0 {
		return Result{}, fmt.Errorf("'linger' must not be negative, not %v", o.Linger)
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r, ch, err := open(path, o.Topic)
	if err != nil {
		return Result{}, err
	}
	defer r.Close()
	for _, w := range r.Warnings() {
		log.Warn("the bag's metadata disagrees with its files", "bag", path, "what", w)
	}
	res := Result{Topic: ch.Topic}
	newMsg := func() any { return &sensor_msgs.Image{} }
	if ch.Type == "sensor_msgs/msg/CompressedImage" {
		newMsg = func() any { return &sensor_msgs.CompressedImage{} }
	}
	role := node.RoleOutput
	if bestEffort(ch.QoS) {
		role = node.RoleSensor
	}
	name := t.Resolve(ch.Topic)
	pub, err := t.Advertise(node.TopicSpec{Name: name, Type: newMsg(), Role: role})
	if err != nil {
		return res, err
	}
	defer pub.Close()
	log.Info("playing", "bag", path, "topic", ch.Topic, "as", name, "type", ch.Type, "messages", ch.Count, "rate", o.Rate)

	if err := sleep(ctx, o.Delay); err != nil {
		return res, err
	}
	var start time.Time // wall time of the first message
	var first time.Time // its log time
	for m, err := range r.Messages(ch.Topic) {
		if err != nil {
			return res, err
		}
		if start.IsZero() {
			start, first = time.Now(), m.LogTime
		} else {
			due := start.Add(time.Duration(float64(m.LogTime.Sub(first)) / o.Rate))
			if err := sleep(ctx, time.Until(due)); err != nil {
				return res, err
			}
		}
		msg := newMsg()
		if err := m.Decode(msg); err != nil {
			if res.Skipped == 0 {
				res.FirstErr = fmt.Errorf("message %d on %s: %w", m.Sequence, ch.Topic, err)
				log.Warn("skipping messages that do not decode", "first", res.FirstErr)
			}
			res.Skipped++
			continue
		}
		if err := pub.Write(msg); err != nil {
			return res, err
		}
		res.Published++
	}
	log.Info("played", "topic", ch.Topic, "published", res.Published, "skipped", res.Skipped)
	// a stop during the linger loses nothing: every message went out
	_ = sleep(ctx, o.Linger)
	return res, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// ErrROS1Bag marks a ROS 1 bag given to a player of ROS 2 bags.
var ErrROS1Bag = errors.New("a ROS 1 bag, not a ROS 2 bag (MCAP, .db3 or a rosbag2 bag directory)")

// Check opens the bag at path and picks its topic as Play would, without a
// transport: a command checks its input with it before joining the graph.
func Check(path string, o Options) error {
	r, _, err := open(path, o.Topic)
	if err != nil {
		return err
	}
	return r.Close()
}

// open opens the ROS 2 bag at path (see rosbag2.Open) and picks the topic
// to play. A ROS 1 bag is refused with ErrROS1Bag and the way to play it.
func open(path, topic string) (*rosbag2.Bag, *mcapbag.Channel, error) {
	if f, err := os.Open(path); err == nil {
		head := make([]byte, len(ros1Magic))
		_, err := io.ReadFull(f, head)
		f.Close()
		if err == nil && string(head) == ros1Magic {
			return nil, nil, fmt.Errorf("%s is %w: play it with rosbag play on a ROS 1 master, or map it offline with lingbotmap run %s", path, ErrROS1Bag, path)
		}
	}
	r, err := rosbag2.Open(path)
	if err != nil {
		return nil, nil, err
	}
	ch, err := pickTopic(r, topic, path)
	if err != nil {
		r.Close()
		return nil, nil, err
	}
	return r, ch, nil
}

// ros1Magic starts every ROS 1 bag (format 2.0, the only one rosbag writes).
const ros1Magic = "#ROSBAG V2.0\n"

func pickTopic(r *rosbag2.Bag, topic, path string) (*mcapbag.Channel, error) {
	var images []*mcapbag.Channel
	for _, c := range r.Channels() {
		if c.Type == "sensor_msgs/msg/Image" || c.Type == "sensor_msgs/msg/CompressedImage" {
			images = append(images, c)
		}
	}
	var names []string
	for _, c := range images {
		names = append(names, c.Topic)
	}
	slices.Sort(names)
	list := strings.Join(names, ", ")
	if list == "" {
		list = "none"
	}
	var pick *mcapbag.Channel
	switch {
	case topic != "":
		for _, c := range images {
			if c.Topic == topic {
				pick = c
			}
		}
		if pick == nil {
			return nil, fmt.Errorf("MCAP bag %s: no image topic %q (image topics: %s)", path, topic, list)
		}
	case len(images) == 1:
		pick = images[0]
	case len(images) == 0:
		return nil, fmt.Errorf("MCAP bag %s: no sensor_msgs/msg/Image or CompressedImage topic", path)
	default:
		return nil, fmt.Errorf("MCAP bag %s: several image topics (%s): choose one with --topic", path, list)
	}
	if pick.MessageEncoding != mcapbag.MessageEncoding {
		return nil, fmt.Errorf("MCAP bag %s: topic %s is encoded as %q, not CDR", path, pick.Topic, pick.MessageEncoding)
	}
	return pick, nil
}

// bestEffort reads rosbag2's offered_qos_profiles: Humble writes reliability
// as a number (2 = best effort), Jazzy as a word ("best_effort").
func bestEffort(qos string) bool {
	var profiles []struct {
		Reliability any `yaml:"reliability"`
	}
	if err := yaml.Unmarshal([]byte(qos), &profiles); err != nil || len(profiles) == 0 {
		return false
	}
	for _, p := range profiles {
		switch v := p.Reliability.(type) {
		case int:
			if v != 2 {
				return false
			}
		case string:
			if v != "best_effort" {
				return false
			}
		default:
			return false
		}
	}
	return true
}
