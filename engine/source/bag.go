package source

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"

	"github.com/lingbotmap/lingbotmap/engine"
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
	path  string
	topic string
	typ   string
	opt   Options
	total int

	r      *bag.Reader
	next   func() (*bag.Message, error, bool)
	stop   func()
	index  int // messages of the topic read so far
	frames int // frames returned
	done   bool

	skipped  int
	firstErr error

	noticed map[string]bool // precision losses already reported
	notices []string        // not yet taken by Notices
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
	b := &Bag{path: path, opt: opt, r: r, total: -1}
	if err := b.pickTopic(); err != nil {
		r.Close()
		return nil, err
	}
	b.next, b.stop = iter.Pull2(r.Messages(b.topic))
	return b, nil
}

func (b *Bag) pickTopic() error {
	var images []string
	types := map[string]string{}
	counts := map[string]uint64{}
	for _, c := range b.r.Connections() {
		types[c.Topic] = c.Type
		counts[c.Topic] += c.Count
		if (c.Type == typeImage || c.Type == typeCompressed) && !slices.Contains(images, c.Topic) {
			images = append(images, c.Topic)
		}
	}
	slices.Sort(images)
	list := "none"
	if len(images) > 0 {
		list = strings.Join(images, ", ")
	}
	switch {
	case b.opt.Topic != "":
		t, ok := types[b.opt.Topic]
		if !ok {
			return fmt.Errorf("bag %s: no topic %q (image topics: %s)", b.path, b.opt.Topic, list)
		}
		if t != typeImage && t != typeCompressed {
			return fmt.Errorf("bag %s: topic %s carries %s, not sensor_msgs/Image or CompressedImage (image topics: %s)", b.path, b.opt.Topic, t, list)
		}
		b.topic = b.opt.Topic
	case len(images) == 1:
		b.topic = images[0]
	case len(images) == 0:
		return fmt.Errorf("bag %s: no sensor_msgs/Image or CompressedImage topic", b.path)
	default:
		return fmt.Errorf("bag %s: several image topics (%s): choose one with --topic", b.path, list)
	}
	b.typ = types[b.topic]
	if b.r.Info().Indexed {
		b.total = b.opt.selected(int(counts[b.topic]))
	}
	return nil
}

// Next decodes the next selected image message.
func (b *Bag) Next(ctx context.Context) (engine.Frame, error) {
	for {
		if err := ctx.Err(); err != nil {
			return engine.Frame{}, err
		}
		if b.done {
			return engine.Frame{}, io.EOF
		}
		keep, done := b.opt.keep(b.index)
		if done {
			b.finish()
			return engine.Frame{}, io.EOF
		}
		m, err, ok := b.next()
		if !ok {
			b.finish()
			return engine.Frame{}, io.EOF
		}
		if err != nil {
			b.finish()
			if pe := (*bag.PartialError)(nil); errors.As(err, &pe) {
				return engine.Frame{}, fmt.Errorf("bag %s: %w: %d frames were used; %w", b.path, ErrPartial, b.frames, err)
			}
			return engine.Frame{}, fmt.Errorf("bag %s: %w", b.path, err)
		}
		i := b.index
		b.index++
		if !keep {
			continue
		}
		img, stamp, loss, err := decodeBagImage(m)
		if err != nil {
			b.skipped++
			if b.firstErr == nil {
				b.firstErr = fmt.Errorf("message %d on %s: %w", i, b.topic, err)
			}
			continue
		}
		if loss != "" && !b.noticed[loss] {
			if b.noticed == nil {
				b.noticed = map[string]bool{}
			}
			b.noticed[loss] = true
			b.notices = append(b.notices, fmt.Sprintf("%s (first on message %d of %s)", loss, i, b.topic))
		}
		if stamp.IsZero() || stamp.Unix() == 0 {
			stamp = m.Time
		}
		b.frames++
		return b.opt.frame(uint64(i), stamp, img)
	}
}

// decodeBagImage decodes an Image or CompressedImage message and returns
// its header stamp and the precision the decoding drops ("" when none).
func decodeBagImage(m *bag.Message) (*image.RGBA, time.Time, string, error) {
	switch m.Type {
	case typeImage:
		var im sensor_msgs.Image
		if err := m.Decode(&im); err != nil {
			return nil, time.Time{}, "", err
		}
		img, err := msgs.DecodeImage(&im)
		loss, _ := msgs.PrecisionLoss(im.Encoding)
		return img, im.Header.Stamp, loss, err
	case typeCompressed:
		var cm sensor_msgs.CompressedImage
		if err := m.Decode(&cm); err != nil {
			return nil, time.Time{}, "", err
		}
		img, err := msgs.DecodeCompressed(&cm)
		return img, cm.Header.Stamp, compressedLoss(cm.Data), err
	}
	return nil, time.Time{}, "", fmt.Errorf("message type %s is not an image", m.Type)
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

// Notices returns, once each, what the source noticed about its input
// since the last call: 16-bit images reduced to 8 bits. The caller shows
// them as warnings.
func (b *Bag) Notices() []string {
	n := b.notices
	b.notices = nil
	return n
}

func (b *Bag) finish() {
	if !b.done {
		b.done = true
		b.stop()
	}
}

// Skipped is the number of selected messages that did not decode, and the
// first of their errors.
func (b *Bag) Skipped() (int, error) { return b.skipped, b.firstErr }

// Len is the number of frames to come, from the bag's index (-1 for a bag
// without one). Skipped messages make the count smaller.
func (b *Bag) Len() int { return b.total }

// Topic is the image topic read.
func (b *Bag) Topic() string { return b.topic }

// Describe names the bag and the topic.
func (b *Bag) Describe() string {
	return fmt.Sprintf("ROS bag %s, topic %s (%s)", b.path, b.topic, b.typ)
}

// Close stops reading and closes the file.
func (b *Bag) Close() error {
	b.finish()
	return b.r.Close()
}
