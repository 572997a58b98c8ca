package source

import (
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lingbotmap/lingbotmap/msgs/bag"
	"github.com/lingbotmap/lingbotmap/msgs/mcapbag"
	"github.com/lingbotmap/lingbotmap/msgs/rosbag2"
)

// TopicMessage is one message of a bag topic read beside the images (the
// robot's /tf, odometry, depth): its type, record time and a decoder into a
// goroslib message type (ROS 1 wire format or CDR, as the bag holds it).
type TopicMessage struct {
	Topic, Type string
	// Time is when the message was recorded, not its header stamp.
	Time   time.Time
	Decode func(into any) error
}

// Topic reads one topic of a bag (ROS 1 .bag, .mcap, rosbag2 directory or
// .db3) in record order, one message at a time, so that it can follow the
// images through a long bag with bounded memory.
type Topic struct {
	Name string
	// Type is the topic's message type as the bag names it
	// ("nav_msgs/Odometry", "nav_msgs/msg/Odometry").
	Type  string
	next  func() (TopicMessage, error, bool)
	stop  func()
	close func() error
}

// ErrNoTopic is a topic the bag does not have.
var ErrNoTopic = errors.New("the bag has no such topic")

// OpenTopic opens the bag at path and reads topic from it.
func OpenTopic(path, topic string) (*Topic, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("bag: %w", err)
	}
	t := &Topic{Name: topic}
	var seq iter.Seq2[TopicMessage, error]
	switch {
	case st.IsDir() && rosbag2.IsBagDir(path), strings.EqualFold(filepath.Ext(path), ".db3"), filepath.Base(path) == rosbag2.MetadataFile:
		b, err := rosbag2.Open(path)
		if err != nil {
			return nil, err
		}
		for _, c := range b.Channels() {
			if c.Topic == topic {
				t.Type = c.Type
			}
		}
		t.close, seq = b.Close, mcapMessages(b.Messages(topic))
	case strings.EqualFold(filepath.Ext(path), ".bag"):
		r, err := bag.Open(path)
		if err != nil {
			return nil, err
		}
		for _, c := range r.Connections() {
			if c.Topic == topic {
				t.Type = c.Type
			}
		}
		t.close = r.Close
		seq = func(yield func(TopicMessage, error) bool) {
			for m, err := range r.Messages(topic) {
				if err != nil {
					yield(TopicMessage{}, err)
					return
				}
				if !yield(TopicMessage{Topic: m.Topic, Type: m.Type, Time: m.Time, Decode: m.Decode}, nil) {
					return
				}
			}
		}
	case strings.EqualFold(filepath.Ext(path), ".mcap"):
		r, err := mcapbag.Open(path)
		if err != nil {
			return nil, err
		}
		for _, c := range r.Channels() {
			if c.Topic == topic {
				t.Type = c.Type
			}
		}
		t.close, seq = r.Close, mcapMessages(r.Messages(topic))
	default:
		return nil, fmt.Errorf("%s is not a bag (.bag, .mcap, .db3 or a rosbag2 directory): it has no topics", path)
	}
	if t.Type == "" {
		t.close()
		return nil, fmt.Errorf("%w: %s in %s", ErrNoTopic, topic, path)
	}
	t.next, t.stop = iter.Pull2(seq)
	return t, nil
}

func mcapMessages(msgs iter.Seq2[*mcapbag.Message, error]) iter.Seq2[TopicMessage, error] {
	return func(yield func(TopicMessage, error) bool) {
		for m, err := range msgs {
			if err != nil {
				yield(TopicMessage{}, err)
				return
			}
			if !yield(TopicMessage{Topic: m.Topic, Type: m.Type, Time: m.LogTime, Decode: m.Decode}, nil) {
				return
			}
		}
	}
}

// Next is the next message; ok is false at the end (err says why when the
// bag could not be read to its end).
func (t *Topic) Next() (m TopicMessage, ok bool, err error) {
	m, err, ok = t.next()
	if ok && err != nil {
		return TopicMessage{}, false, fmt.Errorf("topic %s: %w", t.Name, err)
	}
	return m, ok, nil
}

// Close stops reading and closes the bag.
func (t *Topic) Close() error {
	t.stop()
	return t.close()
}

// BagTopics lists the topics of the bag at path with their types.
func BagTopics(path string) (map[string]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("bag: %w", err)
	}
	out := map[string]string{}
	switch {
	case st.IsDir() && rosbag2.IsBagDir(path), strings.EqualFold(filepath.Ext(path), ".db3"), filepath.Base(path) == rosbag2.MetadataFile:
		b, err := rosbag2.Open(path)
		if err != nil {
			return nil, err
		}
		defer b.Close()
		for _, c := range b.Channels() {
			out[c.Topic] = c.Type
		}
	case strings.EqualFold(filepath.Ext(path), ".bag"):
		r, err := bag.Open(path)
		if err != nil {
			return nil, err
		}
		defer r.Close()
		for _, c := range r.Connections() {
			out[c.Topic] = c.Type
		}
	case strings.EqualFold(filepath.Ext(path), ".mcap"):
		r, err := mcapbag.Open(path)
		if err != nil {
			return nil, err
		}
		defer r.Close()
		for _, c := range r.Channels() {
			out[c.Topic] = c.Type
		}
	default:
		return nil, fmt.Errorf("%s is not a bag (.bag, .mcap, .db3 or a rosbag2 directory): it has no topics", path)
	}
	return out, nil
}

// IsImageType says whether a bag type is a raw or compressed image, in ROS 1
// or ROS 2 spelling.
func IsImageType(typ string) bool {
	switch typ {
	case typeImage, typeCompressed, typeImage2, typeCompressed2:
		return true
	}
	return false
}
