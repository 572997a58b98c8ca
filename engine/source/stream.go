package source

import (
	"context"
	"fmt"
	"image"
	"io"
	"iter"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
)

// skipCount counts the selected inputs that did not decode, with the first
// reason: sources skip them, as the node does, rather than end the run.
type skipCount struct {
	skipped  int
	firstErr error
}

// skip counts one more input that did not decode; err names it.
func (s *skipCount) skip(err error) {
	s.skipped++
	if s.firstErr == nil {
		s.firstErr = err
	}
}

// Skipped is the number of selected inputs (images, messages) that did not
// decode, and the first of their errors.
func (s *skipCount) Skipped() (int, error) { return s.skipped, s.firstErr }

// noticeSet holds what a source noticed about its input, each kind once, so
// that a long run warns about a lossy conversion once rather than per frame.
// It is safe for concurrent use: deferred decoding notes from workers.
type noticeSet struct {
	mu      sync.Mutex
	noticed map[string]bool // kinds already reported
	pending []string        // not yet taken by Notices
}

// note records text unless a notice of this kind was recorded before.
func (n *noticeSet) note(kind, text string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.noticed[kind] {
		return
	}
	if n.noticed == nil {
		n.noticed = map[string]bool{}
	}
	n.noticed[kind] = true
	n.pending = append(n.pending, text)
}

// Notices returns, once each, what the source noticed about its input
// since the last call: 16-bit images reduced to 8 bits. The caller shows
// them as warnings.
func (n *noticeSet) Notices() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := n.pending
	n.pending = nil
	return p
}

// imageStream is what the bag sources (ROS 1 bags, ROS 2 MCAP) share once a
// format has opened its file and chosen the topic: selecting messages by
// Options, skipping those that do not decode, and the bookkeeping behind
// Len, Topic, Describe and Close. M is the format's message type; reading
// and decoding stay with the format.
type imageStream[M any] struct {
	skipCount

	kind  string // what Describe calls the file, e.g. "ROS bag"
	path  string
	topic string
	typ   string
	opt   Options
	total int

	file io.Closer
	// decode gives a message's image and stamp; a message it fails on is
	// skipped. i is the message's index on the topic.
	decode func(m M, i int) (*image.RGBA, time.Time, error)
	// readErr says what an error reading the file means for this format.
	readErr func(error) error

	next   func() (M, error, bool)
	stop   func()
	index  int // messages of the topic read so far
	frames int // frames returned
	done   bool
}

// start reads the format's messages of the topic one at a time.
func (s *imageStream[M]) start(msgs iter.Seq2[M, error]) {
	s.next, s.stop = iter.Pull2(msgs)
}

// Next decodes the next selected image message.
func (s *imageStream[M]) Next(ctx context.Context) (engine.Frame, error) {
	for {
		if err := ctx.Err(); err != nil {
			return engine.Frame{}, err
		}
		if s.done {
			return engine.Frame{}, io.EOF
		}
		keep, done := s.opt.keep(s.index)
		if done {
			s.finish()
			return engine.Frame{}, io.EOF
		}
		m, err, ok := s.next()
		if !ok {
			s.finish()
			return engine.Frame{}, io.EOF
		}
		if err != nil {
			s.finish()
			return engine.Frame{}, s.readErr(err)
		}
		i := s.index
		s.index++
		if !keep {
			continue
		}
		img, stamp, err := s.decode(m, i)
		if err != nil {
			s.skip(fmt.Errorf("message %d on %s: %w", i, s.topic, err))
			continue
		}
		s.frames++
		return s.opt.frame(uint64(i), stamp, img)
	}
}

func (s *imageStream[M]) finish() {
	if !s.done {
		s.done = true
		s.stop()
	}
}

// Len is the number of frames to come, from the bag's index or summary (-1
// for a ROS 1 bag without an index). Skipped messages make the count
// smaller.
func (s *imageStream[M]) Len() int { return s.total }

// Topic is the image topic read.
func (s *imageStream[M]) Topic() string { return s.topic }

// Describe names the bag and the topic.
func (s *imageStream[M]) Describe() string {
	return fmt.Sprintf("%s %s, topic %s (%s)", s.kind, s.path, s.topic, s.typ)
}

// Close stops reading and closes the file.
func (s *imageStream[M]) Close() error {
	s.finish()
	return s.file.Close()
}

// stampOr is the image header's stamp, or logged (when the bag stored the
// message) for a header without one.
func stampOr(header, logged time.Time) time.Time {
	if header.IsZero() || header.Unix() == 0 {
		return logged
	}
	return header
}

// topicType is one connection (ROS 1) or channel (MCAP) of a bag.
type topicType struct{ topic, typ string }

// pickImageTopic chooses the topic to read among a bag's connections: want,
// or else the only topic carrying imageType or compressedType. name starts
// the errors (e.g. "bag cam.bag"). It returns the topic's message type.
func pickImageTopic(name, want string, conns []topicType, imageType, compressedType string) (topic, typ string, err error) {
	var images []string
	types := map[string]string{}
	for _, c := range conns {
		types[c.topic] = c.typ
		if (c.typ == imageType || c.typ == compressedType) && !slices.Contains(images, c.topic) {
			images = append(images, c.topic)
		}
	}
	slices.Sort(images)
	list := "none"
	if len(images) > 0 {
		list = strings.Join(images, ", ")
	}
	switch {
	case want != "":
		t, ok := types[want]
		if !ok {
			return "", "", fmt.Errorf("%s: no topic %q (image topics: %s)", name, want, list)
		}
		if t != imageType && t != compressedType {
			return "", "", fmt.Errorf("%s: topic %s carries %s, not %s or CompressedImage (image topics: %s)", name, want, t, imageType, list)
		}
		topic = want
	case len(images) == 1:
		topic = images[0]
	case len(images) == 0:
		return "", "", fmt.Errorf("%s: no %s or CompressedImage topic", name, imageType)
	default:
		return "", "", fmt.Errorf("%s: several image topics (%s): choose one with --topic", name, list)
	}
	return topic, types[topic], nil
}
