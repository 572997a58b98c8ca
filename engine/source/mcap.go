package source

import (
	"context"
	"fmt"
	"image"
	"io"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/msgs"
	"github.com/lingbotmap/lingbotmap/msgs/mcapbag"
)

// ROS 2 message types an MCAP source reads.
const (
	typeImage2      = "sensor_msgs/msg/Image"
	typeCompressed2 = "sensor_msgs/msg/CompressedImage"
)

// MCAP reads the images of one topic of a ROS 2 bag in MCAP (rosbag2's
// default storage), one message at a time in log-time order. Frames are
// stamped with the image header's stamp, or the log time when the header has
// none. Messages that do not decode (corrupt CDR, unsupported encodings) are
// skipped and counted, as for ROS 1 bags; Skipped reports them.
type MCAP struct {
	path  string
	topic string
	typ   string
	opt   Options
	total int

	r     *mcapbag.Reader
	next  func() (*mcapbag.Message, error, bool)
	stop  func()
	index int
	done  bool

	skipped  int
	firstErr error
}

// OpenMCAP opens path and picks the image topic: opt.Topic, or the only
// image topic of the bag.
func OpenMCAP(path string, opt Options) (Source, error) {
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	r, err := mcapbag.Open(path)
	if err != nil {
		return nil, err
	}
	m := &MCAP{path: path, opt: opt, r: r, total: -1}
	if err := m.pickTopic(); err != nil {
		r.Close()
		return nil, err
	}
	m.next, m.stop = iter.Pull2(r.Messages(m.topic))
	return m, nil
}

func (m *MCAP) pickTopic() error {
	var images []string
	byTopic := map[string]*mcapbag.Channel{}
	counts := map[string]uint64{}
	for _, c := range m.r.Channels() {
		byTopic[c.Topic] = c
		counts[c.Topic] += c.Count
		if (c.Type == typeImage2 || c.Type == typeCompressed2) && !slices.Contains(images, c.Topic) {
			images = append(images, c.Topic)
		}
	}
	slices.Sort(images)
	list := "none"
	if len(images) > 0 {
		list = strings.Join(images, ", ")
	}
	switch {
	case m.opt.Topic != "":
		c, ok := byTopic[m.opt.Topic]
		if !ok {
			return fmt.Errorf("MCAP bag %s: no topic %q (image topics: %s)", m.path, m.opt.Topic, list)
		}
		if c.Type != typeImage2 && c.Type != typeCompressed2 {
			return fmt.Errorf("MCAP bag %s: topic %s carries %s, not sensor_msgs/msg/Image or CompressedImage (image topics: %s)", m.path, m.opt.Topic, c.Type, list)
		}
		m.topic = m.opt.Topic
	case len(images) == 1:
		m.topic = images[0]
	case len(images) == 0:
		return fmt.Errorf("MCAP bag %s: no sensor_msgs/msg/Image or CompressedImage topic", m.path)
	default:
		return fmt.Errorf("MCAP bag %s: several image topics (%s): choose one with --topic", m.path, list)
	}
	c := byTopic[m.topic]
	if c.MessageEncoding != mcapbag.MessageEncoding {
		return fmt.Errorf("MCAP bag %s: topic %s is encoded as %q, not CDR", m.path, m.topic, c.MessageEncoding)
	}
	m.typ = c.Type
	m.total = m.opt.selected(int(counts[m.topic]))
	return nil
}

// Next decodes the next selected image message.
func (m *MCAP) Next(ctx context.Context) (engine.Frame, error) {
	for {
		if err := ctx.Err(); err != nil {
			return engine.Frame{}, err
		}
		if m.done {
			return engine.Frame{}, io.EOF
		}
		keep, done := m.opt.keep(m.index)
		if done {
			m.finish()
			return engine.Frame{}, io.EOF
		}
		msg, err, ok := m.next()
		if !ok {
			m.finish()
			return engine.Frame{}, io.EOF
		}
		if err != nil {
			m.finish()
			return engine.Frame{}, err
		}
		i := m.index
		m.index++
		if !keep {
			continue
		}
		img, stamp, err := decodeMCAPImage(msg)
		if err != nil {
			m.skipped++
			if m.firstErr == nil {
				m.firstErr = fmt.Errorf("message %d on %s: %w", i, m.topic, err)
			}
			continue
		}
		if stamp.IsZero() || stamp.Unix() == 0 {
			stamp = msg.LogTime
		}
		return m.opt.frame(uint64(i), stamp, img)
	}
}

// decodeMCAPImage decodes an Image or CompressedImage CDR message and returns
// its header stamp.
func decodeMCAPImage(m *mcapbag.Message) (*image.RGBA, time.Time, error) {
	switch m.Type {
	case typeImage2:
		var im sensor_msgs.Image
		if err := m.Decode(&im); err != nil {
			return nil, time.Time{}, err
		}
		img, err := msgs.DecodeImage(&im)
		return img, im.Header.Stamp, err
	case typeCompressed2:
		var cm sensor_msgs.CompressedImage
		if err := m.Decode(&cm); err != nil {
			return nil, time.Time{}, err
		}
		img, err := msgs.DecodeCompressed(&cm)
		return img, cm.Header.Stamp, err
	}
	return nil, time.Time{}, fmt.Errorf("message type %s is not an image", m.Type)
}

func (m *MCAP) finish() {
	if !m.done {
		m.done = true
		m.stop()
	}
}

// Skipped is the number of selected messages that did not decode, and the
// first of their errors.
func (m *MCAP) Skipped() (int, error) { return m.skipped, m.firstErr }

// Len is the number of frames to come, from the bag's summary. Skipped
// messages make the count smaller.
func (m *MCAP) Len() int { return m.total }

// Topic is the image topic read.
func (m *MCAP) Topic() string { return m.topic }

// Describe names the bag and the topic.
func (m *MCAP) Describe() string {
	return fmt.Sprintf("ROS 2 MCAP bag %s, topic %s (%s)", m.path, m.topic, m.typ)
}

// Close stops reading and closes the file.
func (m *MCAP) Close() error {
	m.finish()
	return m.r.Close()
}
