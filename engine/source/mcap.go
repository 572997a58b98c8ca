package source

import (
	"errors"
	"fmt"
	"image"
	"time"

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
	imageStream[*mcapbag.Message]
	noticeSet
}

// OpenMCAP opens path and picks the image topic: opt.Topic, or the only
// image topic of the bag.
func OpenMCAP(path string, opt Options) (Source, error) {
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	r, err := mcapbag.Open(path)
	if err != nil {
		return nil, mcapErr(err, 0)
	}
	m := &MCAP{imageStream[*mcapbag.Message]{kind: "ROS 2 MCAP bag", path: path, opt: opt, total: -1, file: r}, noticeSet{}}
	m.decode = m.decodeFrame
	m.readErr = func(err error) error { return mcapErr(err, m.frames) }
	if err := m.pickTopic(r); err != nil {
		r.Close()
		if d := r.Damage(); d != nil {
			// the topic may be missing because of the damage
			return nil, mcapErr(fmt.Errorf("%w; %w", err, d), 0)
		}
		return nil, err
	}
	m.start(r.Messages(m.topic))
	return m, nil
}

func (m *MCAP) pickTopic(r *mcapbag.Reader) error {
	var conns []topicType
	byTopic := map[string]*mcapbag.Channel{}
	counts := map[string]uint64{}
	for _, c := range r.Channels() {
		conns = append(conns, topicType{c.Topic, c.Type})
		byTopic[c.Topic] = c
		counts[c.Topic] += c.Count
	}
	var err error
	if m.topic, m.typ, err = pickImageTopic("MCAP bag "+m.path, m.opt.Topic, conns, typeImage2, typeCompressed2); err != nil {
		return err
	}
	if c := byTopic[m.topic]; c.MessageEncoding != mcapbag.MessageEncoding {
		return fmt.Errorf("MCAP bag %s: topic %s is encoded as %q, not CDR", m.path, m.topic, c.MessageEncoding)
	}
	m.total = m.opt.selected(int(counts[m.topic]))
	return nil
}

// mcapErr marks a damaged MCAP file (*mcapbag.DamageError) as ErrPartial,
// saying how many frames came before the end; other errors pass through.
func mcapErr(err error, frames int) error {
	if de := (*mcapbag.DamageError)(nil); errors.As(err, &de) {
		return fmt.Errorf("%w: %d frames were used; %w", ErrPartial, frames, err)
	}
	return err
}

// decodeFrame decodes message i, stamps it with its log time when its
// header has no stamp, and notes, once per kind, the precision its decoding
// drops (16-bit images, as in ROS 1 bags).
func (m *MCAP) decodeFrame(msg *mcapbag.Message, i int) (*image.RGBA, time.Time, error) {
	img, stamp, loss, err := decodeImageMessage(msg.Type, msg.Decode, typeImage2, typeCompressed2)
	return m.decodedOf(m.topic, img, stampOr(stamp, msg.LogTime), loss, i, err)
}
