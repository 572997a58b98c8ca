package source

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"

	"github.com/lingbotmap/lingbotmap/msgs"
	"github.com/lingbotmap/lingbotmap/msgs/bag"
)

// ErrPartial marks an input that was read only in part: it is truncated or
// partly corrupt, and the frames before the damage (and any after it that
// could be read) were returned. The error that wraps it says how much was
// used; for a bag it also wraps the *bag.PartialError.
var ErrPartial = errors.New("the input is truncated or corrupt")

// ROS message types a bag source reads.
const (
	typeImage      = "sensor_msgs/Image"
	typeCompressed = "sensor_msgs/CompressedImage"
)

// Bag reads the images of one topic of a ROS bag, one message at a time
// (msgs/bag streams records; memory is bounded by one message). Frames are
// stamped with the image header's stamp, or the record time when the header
// has none. Messages that do not decode (corrupt data, unsupported
// encodings) are skipped and counted, as the node does, rather than ending
// the run; Skipped reports them.
type Bag struct {
	imageStream[*bag.Message]
	noticeSet
}

// OpenBag opens path and picks the image topic: opt.Topic, or the only
// image topic of the bag.
func OpenBag(path string, opt Options) (Source, error) {
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	r, err := bag.Open(path)
	if err != nil {
		return nil, err
	}
	b := &Bag{}
	b.imageStream = imageStream[*bag.Message]{kind: "ROS bag", path: path, opt: opt, total: -1, file: r,
		decode: b.decode, readErr: b.readErr}
	if err := b.pickTopic(r); err != nil {
		r.Close()
		return nil, err
	}
	b.start(r.Messages(b.topic))
	return b, nil
}

func (b *Bag) pickTopic(r *bag.Reader) error {
	var conns []topicType
	counts := map[string]uint64{}
	for _, c := range r.Connections() {
		conns = append(conns, topicType{c.Topic, c.Type})
		counts[c.Topic] += c.Count
	}
	var err error
	if b.topic, b.typ, err = pickImageTopic("bag "+b.path, b.opt.Topic, conns, typeImage, typeCompressed); err != nil {
		return err
	}
	if r.Info().Indexed {
		b.total = b.opt.selected(int(counts[b.topic]))
	}
	return nil
}

// decode decodes message i of the topic and notes, once per kind, the
// precision its decoding drops.
func (b *Bag) decode(m *bag.Message, i int) (*image.RGBA, time.Time, error) {
	img, stamp, loss, err := decodeImageMessage(m.Type, m.Decode, typeImage, typeCompressed)
	return b.decodedOf(b.topic, img, stampOr(stamp, m.Time), loss, i, err)
}

// decodedOf ends the decoding of message i of topic, in either format: it notes, once
// per kind, the precision the decoding dropped.
func (n *noticeSet) decodedOf(topic string, img *image.RGBA, stamp time.Time, loss string, i int, err error) (*image.RGBA, time.Time, error) {
	if err != nil {
		return nil, time.Time{}, err
	}
	if loss != "" {
		n.note(loss, fmt.Sprintf("%s (first on message %d of %s)", loss, i, topic))
	}
	return img, stamp, nil
}

// readErr marks a bag cut short or corrupt as ErrPartial, saying how many
// frames came before the damage.
func (b *Bag) readErr(err error) error {
	if pe := (*bag.PartialError)(nil); errors.As(err, &pe) {
		return fmt.Errorf("bag %s: %w: %d frames were used; %w", b.path, ErrPartial, b.frames, err)
	}
	return fmt.Errorf("bag %s: %w", b.path, err)
}

// decodeImageMessage decodes an Image or CompressedImage message of either
// bag format (typ is the message's type, raw and compressed the format's
// names of the two, decode fills a message value from its bytes) and
// returns its header stamp and the precision the decoding drops ("" when
// none).
func decodeImageMessage(typ string, decode func(any) error, raw, compressed string) (*image.RGBA, time.Time, string, error) {
	switch typ {
	case raw:
		var im sensor_msgs.Image
		if err := decode(&im); err != nil {
			return nil, time.Time{}, "", err
		}
		img, err := msgs.DecodeImage(&im)
		loss, _ := msgs.PrecisionLoss(im.Encoding)
		return img, im.Header.Stamp, loss, err
	case compressed:
		var cm sensor_msgs.CompressedImage
		if err := decode(&cm); err != nil {
			return nil, time.Time{}, "", err
		}
		img, err := msgs.DecodeCompressed(&cm)
		return img, cm.Header.Stamp, compressedLoss(cm.Data), err
	}
	return nil, time.Time{}, "", fmt.Errorf("message type %s is not an image", typ)
}

// compressedLoss says whether a compressed image is a 16-bit PNG, which
// msgs.DecodeCompressed reduces to the high byte of each sample. Only the
// header is read.
func compressedLoss(data []byte) string {
	if !bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")) {
		return ""
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return ""
	}
	switch cfg.ColorModel {
	case color.Gray16Model:
		return "16-bit grey PNG images are reduced to 8 bits (the high byte of each sample is kept)"
	case color.RGBA64Model, color.NRGBA64Model:
		return "16-bit colour PNG images are reduced to 8 bits per sample (the high byte is kept)"
	}
	return ""
}
