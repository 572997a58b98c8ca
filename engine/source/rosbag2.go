package source

import (
	"errors"
	"fmt"
	"image"
	"time"

	"github.com/lingbotmap/lingbotmap/msgs/mcapbag"
	"github.com/lingbotmap/lingbotmap/msgs/rosbag2"
)

// ROS2Bag reads the images of one topic of a rosbag2 bag: a bag directory
// (metadata.yaml and its split files, MCAP or sqlite3, with any rosbag2
// compression) or one .db3 file, file after file in the bag's order.
// Frames are stamped as for MCAP files; messages that do not decode are
// skipped and counted. Missing or unreadable split files, or fewer messages
// than metadata.yaml counts, end the frames with ErrPartial.
type ROS2Bag struct {
	imageStream[*mcapbag.Message]
	noticeSet
}

// OpenROS2Bag opens the bag at path and picks the image topic: opt.Topic,
// or the only image topic of the bag.
func OpenROS2Bag(path string, opt Options) (Source, error) {
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	b, err := rosbag2.Open(path)
	if err != nil {
		return nil, err
	}
	s := &ROS2Bag{}
	kind := fmt.Sprintf("rosbag2 bag (%s", b.Storage())
	if m := b.CompressionMode(); m != rosbag2.CompressionNone {
		kind += ", " + m + " compression"
	}
	if n := len(b.Files()); n > 1 {
		kind += fmt.Sprintf(", %d split files", n)
	}
	s.imageStream = imageStream[*mcapbag.Message]{kind: kind + ")", path: path, opt: opt, total: -1, file: b,
		decode: s.decodeFrame, readErr: s.readErr}
	for _, w := range b.Warnings() {
		s.note(w, w)
	}
	var conns []topicType
	for _, c := range b.Channels() {
		conns = append(conns, topicType{c.Topic, c.Type})
	}
	if s.topic, s.typ, err = pickImageTopic("rosbag2 bag "+path, opt.Topic, conns, typeImage2, typeCompressed2); err != nil {
		b.Close()
		return nil, err
	}
	for _, c := range b.Channels() {
		if c.Topic == s.topic {
			if c.MessageEncoding != mcapbag.MessageEncoding {
				b.Close()
				return nil, fmt.Errorf("rosbag2 bag %s: topic %s is encoded as %q, not CDR", path, s.topic, c.MessageEncoding)
			}
			s.total = opt.selected(int(c.Count))
		}
	}
	s.start(b.Messages(s.topic))
	return s, nil
}

// decodeFrame decodes message i as an MCAP source does.
func (s *ROS2Bag) decodeFrame(msg *mcapbag.Message, i int) (*image.RGBA, time.Time, error) {
	img, stamp, loss, err := decodeImageMessage(msg.Type, msg.Decode, typeImage2, typeCompressed2)
	return s.decodedOf(s.topic, img, stampOr(stamp, msg.LogTime), loss, i, err)
}

// readErr marks a bag read in part as ErrPartial, saying how many frames
// came before.
func (s *ROS2Bag) readErr(err error) error {
	if pe := (*rosbag2.PartialError)(nil); errors.As(err, &pe) {
		return fmt.Errorf("%w: %d frames were used; %w", ErrPartial, s.frames, err)
	}
	return fmt.Errorf("rosbag2 bag %s: %w", s.path, err)
}
