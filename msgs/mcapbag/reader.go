package mcapbag

import (
	"encoding/binary"
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
	fr       *framing
	header   *mcap.Header
	indexed  bool
	channels []*Channel
	byID     map[uint16]*Channel
}

// Open opens an MCAP file, checks the framing of every record and chunk and
// the CRC of every chunk (one pass over the file, see walkFile) and reads
// the summary (channels, counts). A file without a usable summary is
// scanned once more to find its channels, and read in file order. A damaged
// file (Damage) is read in file order from its sound chunks, and its
// messages end with the *DamageError; one so damaged that no channel could
// be read is an error wrapping a *DamageError.
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
	r := &Reader{path: path, f: f, rs: io.NewSectionReader(f, 0, fr.end), fr: fr, byID: map[uint16]*Channel{}}
	if fr.damage != nil {
		err = r.damagedChannels()
	} else {
		err = safely(func() error { return r.readSummary(fr) })
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("MCAP bag %s: %w", path, err)
	}
	return r, nil
}

// Damage is the damage Open found, nil for a sound file. Messages ends with
// it, as its error, after the last message that could be read.
func (r *Reader) Damage() *DamageError {
	if r.fr.damage == nil {
		return nil
	}
	d := *r.fr.damage
	return &d
}

// damagedChannels takes the channels of a damaged file from its summary and
// its sound records, with the messages counted in its sound chunks.
func (r *Reader) damagedChannels() error {
	fr := r.fr
	r.header = &mcap.Header{}
	if b, err := r.recordBody(int64(len(mcap.Magic)), mcap.OpHeader, 1<<20); err == nil {
		if h, err := safeParse(mcap.ParseHeader, b); err == nil {
			r.header = h
		}
	}
	for id, c := range fr.channels {
		ch := &Channel{ID: id, Topic: c.Topic, MessageEncoding: c.MessageEncoding, QoS: c.Metadata["offered_qos_profiles"], Count: fr.counts[id]}
		if s := fr.schemas[c.SchemaID]; s != nil {
			ch.Type, ch.SchemaEncoding = s.Name, s.Encoding
		}
		r.add(ch)
	}
	r.sort()
	if len(r.channels) == 0 {
		return fmt.Errorf("no channel could be read: %w", r.Damage())
	}
	return nil
}

// recordBody reads the body of the top-level record at pos, which the walk
// found, if it has opcode op and at most limit bytes.
func (r *Reader) recordBody(pos int64, op mcap.OpCode, limit uint64) ([]byte, error) {
	n, ok := r.fr.records[pos]
	if !ok || r.fr.ops[pos] != op || n > limit {
		return nil, fmt.Errorf("no %s record of at most %d bytes at byte %d", op, limit, pos)
	}
	b := make([]byte, n)
	_, err := r.f.ReadAt(b, pos+9)
	return b, err
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
	if r.fr.damage != nil {
		return r.damagedMessages(topics)
	}
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

// damagedMessages yields the messages of the sound records of a damaged
// file in file order, one chunk at a time, then the *DamageError.
func (r *Reader) damagedMessages(topics []string) iter.Seq2[*Message, error] {
	return func(yield func(*Message, error) bool) {
		var dec chunkDecoder
		defer dec.close()
		d := r.Damage()
		// emit yields the message record body b when its topic is wanted.
		emit := func(b []byte) bool {
			m, err := safeParse(mcap.ParseMessage, b)
			if err != nil {
				return true // the chunk's CRC held: a writer's bad record, not damage
			}
			ch := r.byID[m.ChannelID]
			if ch == nil || (len(topics) > 0 && !slices.Contains(topics, ch.Topic)) {
				return true
			}
			out := &Message{Channel: ch, Topic: ch.Topic, Type: ch.Type, Sequence: m.Sequence,
				LogTime: nanos(m.LogTime), PublishTime: nanos(m.PublishTime), Data: slices.Clone(m.Data)}
			if !yield(out, nil) {
				return false
			}
			d.Messages++
			return true
		}
		for _, pos := range r.fr.order {
			switch r.fr.ops[pos] {
			case mcap.OpMessage:
				b, err := r.recordBody(pos, mcap.OpMessage, MaxChunkSize)
				if err != nil {
					yield(nil, fmt.Errorf("MCAP bag %s: %w", r.path, err))
					return
				}
				if !emit(b) {
					return
				}
			case mcap.OpChunk:
				n, ok := r.fr.chunks[pos]
				if !ok {
					continue // damaged, left out
				}
				recs, err := dec.decode(io.NewSectionReader(r.f, pos+9, int64(n)), n)
				if err != nil { // the file changed since Open
					yield(nil, fmt.Errorf("MCAP bag %s: the chunk at byte %d: %w", r.path, pos, err))
					return
				}
				for len(recs) >= 9 {
					op, l := mcap.OpCode(recs[0]), binary.LittleEndian.Uint64(recs[1:9])
					if l > uint64(len(recs)-9) {
						break
					}
					if op == mcap.OpMessage && !emit(recs[9:9+l]) {
						return
					}
					recs = recs[9+l:]
				}
			}
		}
		yield(nil, fmt.Errorf("MCAP bag %s: %w", r.path, d))
	}
}

func nanos(ns uint64) time.Time {
	return time.Unix(0, int64(min(ns, uint64(1<<63-1)))).UTC()
}

// Close closes the file.
func (r *Reader) Close() error { return r.f.Close() }
