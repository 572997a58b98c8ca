package mcapbag

import (
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"slices"
	"time"

	"github.com/foxglove/mcap/go/mcap"

	"github.com/lingbotmap/lingbotmap/msgs/cdr"
)

// MaxChunkSize bounds the decompressed size of one chunk, so that a damaged
// or hostile file cannot make the reader allocate without limit.
const MaxChunkSize = 256 << 20

// Channel is one topic of a bag.
type Channel struct {
	ID              uint16
	Topic           string
	Type            string // the schema name, "sensor_msgs/msg/Image"
	SchemaEncoding  string // "ros2msg" in ROS 2 bags
	MessageEncoding string // "cdr" in ROS 2 bags
	QoS             string // offered_qos_profiles metadata, if any
	Count           uint64 // messages on the channel
}

// Message is one message of a bag. Data is the serialised message; it
// belongs to the caller.
type Message struct {
	Channel     *Channel
	Topic       string
	Type        string
	Sequence    uint32
	LogTime     time.Time // when it was recorded
	PublishTime time.Time
	Data        []byte
}

// Decode decodes a CDR message into into, a pointer to a type msgs/cdr
// knows. Errors in the message bytes are *msgs.DecodeError.
func (m *Message) Decode(into any) error {
	if m.Channel.MessageEncoding != MessageEncoding {
		return fmt.Errorf("topic %s: message encoding %q is not %q", m.Topic, m.Channel.MessageEncoding, MessageEncoding)
	}
	return cdr.Unmarshal(m.Data, into)
}

// Reader streams the messages of an MCAP file, one chunk at a time.
type Reader struct {
	path     string
	f        *os.File
	rs       *io.SectionReader // the well-framed part of f
	header   *mcap.Header
	indexed  bool
	channels []*Channel
	byID     map[uint16]*Channel
}

// Open opens an MCAP file, checks the framing of every record and chunk
// (one pass over the file, see walkFile) and reads the summary (channels,
// counts). A file without a usable summary (a recording that was cut short)
// is scanned once more to find its channels, and read in file order.
func Open(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening the MCAP bag: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("opening the MCAP bag: %w", err)
	}
	fr, err := walkFile(f, st.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("MCAP bag %s: %w", path, err)
	}
	r := &Reader{path: path, f: f, rs: io.NewSectionReader(f, 0, fr.end), byID: map[uint16]*Channel{}}
	if err := safely(func() error { return r.readSummary(fr) }); err != nil {
		f.Close()
		return nil, fmt.Errorf("MCAP bag %s: %w", path, err)
	}
	return r, nil
}

func (r *Reader) newReader() (*mcap.Reader, error) {
	if _, err := r.rs.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return mcap.NewReader(r.rs)
}

// safely runs f, turning a panic of the mcap library on malformed input into
// an error: walkFile stops the cases known, this is the backstop for a
// parser of outside bytes that is not ours.
func safely(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("malformed MCAP data: %v", p)
		}
	}()
	return f()
}

func (r *Reader) readSummary(fr *framing) error {
	mr, err := r.newReader()
	if err != nil {
		return err
	}
	r.header = mr.Header()
	var info *mcap.Info
	if fr.summaryUsable() {
		info, err = mr.Info()
	}
	usable := err == nil && info != nil && info.Statistics != nil && len(info.ChunkIndexes) > 0
	for i := 0; usable && i < len(info.ChunkIndexes); i++ {
		usable = fr.chunkIndexOK(info.ChunkIndexes[i])
	}
	if usable {
		r.indexed = true
		for id, c := range info.Channels {
			ch := &Channel{ID: id, Topic: c.Topic, MessageEncoding: c.MessageEncoding, QoS: c.Metadata["offered_qos_profiles"],
				Count: info.Statistics.ChannelMessageCounts[id]}
			if s := info.Schemas[c.SchemaID]; s != nil {
				ch.Type, ch.SchemaEncoding = s.Name, s.Encoding
			}
			r.add(ch)
		}
		r.sort()
		return nil
	}
	// No usable summary: learn the channels from the messages themselves.
	mr, err = r.newReader()
	if err != nil {
		return err
	}
	it, err := mr.Messages(mcap.UsingIndex(false))
	if err != nil {
		return err
	}
	var msg mcap.Message
	for {
		s, c, _, err := it.NextInto(&msg)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		ch := r.byID[c.ID]
		if ch == nil {
			ch = &Channel{ID: c.ID, Topic: c.Topic, MessageEncoding: c.MessageEncoding, QoS: c.Metadata["offered_qos_profiles"]}
			if s != nil {
				ch.Type, ch.SchemaEncoding = s.Name, s.Encoding
			}
			r.add(ch)
		}
		ch.Count++
	}
	r.sort()
	return nil
}

func (r *Reader) add(c *Channel) {
	r.byID[c.ID] = c
	r.channels = append(r.channels, c)
}

func (r *Reader) sort() {
	slices.SortFunc(r.channels, func(a, b *Channel) int { return int(a.ID) - int(b.ID) })
}

// Profile is the header's profile ("ros2" for rosbag2 files).
func (r *Reader) Profile() string { return r.header.Profile }

// Indexed says whether the file has a summary with an index.
func (r *Reader) Indexed() bool { return r.indexed }

// Channels lists the channels in id order.
func (r *Reader) Channels() []*Channel { return r.channels }

// Messages yields the messages of the given topics (all when none are
// given): in log-time order from an indexed file, in file order otherwise.
// An error ends the sequence.
func (r *Reader) Messages(topics ...string) iter.Seq2[*Message, error] {
	return func(yield func(*Message, error) bool) {
		mr, err := r.newReader()
		if err != nil {
			yield(nil, fmt.Errorf("MCAP bag %s: %w", r.path, err))
			return
		}
		opts := []mcap.ReadOpt{mcap.UsingIndex(r.indexed)}
		if r.indexed {
			opts = append(opts, mcap.InOrder(mcap.LogTimeOrder))
		}
		if len(topics) > 0 {
			opts = append(opts, mcap.WithTopics(topics))
		}
		var it mcap.MessageIterator
		err = safely(func() (err error) {
			it, err = mr.Messages(opts...)
			return err
		})
		if err != nil {
			yield(nil, fmt.Errorf("MCAP bag %s: %w", r.path, err))
			return
		}
		var msg mcap.Message
		for {
			var c *mcap.Channel
			var m *mcap.Message
			err := safely(func() (err error) {
				_, c, m, err = it.NextInto(&msg)
				return err
			})
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield(nil, fmt.Errorf("MCAP bag %s: %w", r.path, err))
				return
			}
			ch := r.byID[c.ID]
			if ch == nil {
				yield(nil, fmt.Errorf("MCAP bag %s: message on unknown channel %d", r.path, c.ID))
				return
			}
			out := &Message{Channel: ch, Topic: ch.Topic, Type: ch.Type, Sequence: m.Sequence,
				LogTime: nanos(m.LogTime), PublishTime: nanos(m.PublishTime), Data: slices.Clone(m.Data)}
			if !yield(out, nil) {
				return
			}
		}
	}
}

func nanos(ns uint64) time.Time {
	return time.Unix(0, int64(min(ns, uint64(1<<63-1)))).UTC()
}

// Close closes the file.
func (r *Reader) Close() error { return r.f.Close() }
