package bag

import (
	"bufio"
	"bytes"
	"compress/bzip2"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"reflect"
	"slices"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgproc"
	"github.com/bluenviron/goroslib/v2/pkg/protocommon"
)

// Connection is one (topic, type) stream of a bag, as rosbag record or a
// Writer stored it.
type Connection struct {
	ID                uint32
	Topic             string
	Type              string // e.g. "sensor_msgs/Image"
	MD5Sum            string
	MessageDefinition string
	CallerID          string // the publishing node, when recorded live
	Latching          bool
	// Count is the number of messages, from the bag's index (0 when the bag
	// is not indexed).
	Count uint64
}

// Info summarises an indexed bag from its index alone.
type Info struct {
	Indexed    bool // false for bags left open by a crash: then only Messages knows more
	Chunks     int
	Messages   uint64
	Start, End time.Time // record times of the first and last message
}

// Message is one message record. Data is the serialised message (ROS wire
// format without the length prefix); it belongs to the caller.
type Message struct {
	Conn  *Connection
	Topic string
	Type  string
	Time  time.Time // record time (when it was recorded), not the header stamp
	Data  []byte
}

// ReaderConfig tunes a Reader. The zero value gives the defaults.
type ReaderConfig struct {
	// MaxRecordSize is the largest record accepted, to bound memory on
	// damaged or hostile files. (optional) It defaults to 1 GiB.
	MaxRecordSize int64
}

// Reader streams the messages of a ROS bag 2.0 (uncompressed, bz2 or lz4 chunks)
// one record at a time, so memory stays bounded by the largest message, not
// the file size. It reads bags from this package and from rosbag
// (Python, C++ and rosbag record).
type Reader struct {
	cfg      ReaderConfig
	ra       io.ReaderAt
	size     int64
	closer   io.Closer
	first    int64 // offset of the first record after the bag header
	end      int64 // where the chunk section ends (index_pos, or the file end)
	indexed  bool
	cutAt    int64 // index_pos of a bag whose index lies beyond the end of the file
	indexErr error // why the index of a bag cut inside it could not be read
	conns    map[uint32]*Connection
	chunks   []chunkInfo
}

// Open opens a bag file with the default configuration.
func Open(path string) (*Reader, error) { return ReaderConfig{}.Open(path) }

// Open opens a bag file with this configuration.
func (c ReaderConfig) Open(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening bag: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("opening bag: %w", err)
	}
	r, err := c.NewReader(f, st.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("bag %s: %w", path, err)
	}
	r.closer = f
	return r, nil
}

// NewReader reads a bag of size bytes from ra, with the default configuration.
func NewReader(ra io.ReaderAt, size int64) (*Reader, error) {
	return ReaderConfig{}.NewReader(ra, size)
}

// NewReader reads a bag of size bytes from ra.
func (c ReaderConfig) NewReader(ra io.ReaderAt, size int64) (*Reader, error) {
	if c.MaxRecordSize <= 0 {
		c.MaxRecordSize = 1 << 30
	}
	r := &Reader{cfg: c, ra: ra, size: size, conns: map[uint32]*Connection{}}
	m := make([]byte, len(magic))
	if _, err := ra.ReadAt(m, 0); err != nil || string(m) != magic {
		return nil, fmt.Errorf("%w: it does not start with %q", errFormat, magic[:len(magic)-1])
	}
	rec, err := r.recordAt(int64(len(magic)), size)
	if err != nil {
		return nil, fmt.Errorf("reading the bag header: %w", err)
	}
	if op, err := rec.h.op(); err != nil || op != opBagHeader {
		return nil, fmt.Errorf("%w: the first record is not a bag header", errFormat)
	}
	indexPos, err := rec.h.u64("index_pos")
	if err != nil {
		return nil, err
	}
	r.first = rec.next
	r.end = size
	if indexPos >= uint64(r.first) && indexPos <= uint64(size) && indexPos != 0 {
		r.indexed = true
		r.end = int64(indexPos)
		err := r.readIndex()
		if err == nil {
			return r, nil
		}
		if !errors.Is(err, errTruncated) {
			return nil, err
		}
		// The file ends inside its index: the chunks before it are whole.
		// Read them as an unindexed bag, and say so after the last message.
		r.indexed, r.chunks, r.conns = false, nil, map[uint32]*Connection{}
		r.indexErr = err
	}
	if indexPos > uint64(size) {
		r.cutAt = int64(indexPos)
	}
	// Unindexed (still being recorded, the recorder died, or the file was
	// cut before its index): learn the connections from the chunks themselves.
	for _, err := range r.scan(nil, true) {
		if err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Close releases the file opened by Open.
func (r *Reader) Close() error {
	if r.closer == nil {
		return nil
	}
	return r.closer.Close()
}

// Connections lists the bag's connections ordered by ID.
func (r *Reader) Connections() []*Connection {
	out := make([]*Connection, 0, len(r.conns))
	for _, c := range r.conns {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *Connection) int { return int(int64(a.ID) - int64(b.ID)) })
	return out
}

// Info returns what the index says about the bag.
func (r *Reader) Info() Info {
	in := Info{Indexed: r.indexed, Chunks: len(r.chunks)}
	var start, end rosTime
	for i, c := range r.chunks {
		for _, n := range c.counts {
			in.Messages += uint64(n)
		}
		if i == 0 || c.start.before(start) {
			start = c.start
		}
		if i == 0 || end.before(c.end) {
			end = c.end
		}
	}
	if len(r.chunks) > 0 {
		in.Start, in.End = start.Time(), end.Time()
	}
	return in
}

// record is a top-level record: its parsed header and where its data lies.
type record struct {
	h       header
	dataPos int64
	dataLen int64
	next    int64
}

// recordAt reads the record header at pos; the record must end by limit.
func (r *Reader) recordAt(pos, limit int64) (record, error) {
	var n [4]byte
	if _, err := r.ra.ReadAt(n[:], pos); err != nil {
		return record{}, fmt.Errorf("%w: record at offset %d", errTruncated, pos)
	}
	hlen := int64(binary.LittleEndian.Uint32(n[:]))
	if pos+4+hlen+4 > limit || hlen > r.cfg.MaxRecordSize {
		return record{}, fmt.Errorf("%w: record header at offset %d (%d bytes) overruns the file", errTruncated, pos, hlen)
	}
	hb, err := readFull(io.NewSectionReader(r.ra, pos+4, hlen), uint64(hlen))
	if err != nil {
		return record{}, fmt.Errorf("%w: reading the record header at offset %d: %w", errFormat, pos, err)
	}
	h, err := parseHeader(hb)
	if err != nil {
		return record{}, fmt.Errorf("record at offset %d: %w", pos, err)
	}
	if _, err := r.ra.ReadAt(n[:], pos+4+hlen); err != nil {
		return record{}, fmt.Errorf("%w: record at offset %d", errTruncated, pos)
	}
	dlen := int64(binary.LittleEndian.Uint32(n[:]))
	dataPos := pos + 8 + hlen
	if dataPos+dlen > limit {
		return record{}, fmt.Errorf("%w: record data at offset %d (%d bytes) overruns the file", errTruncated, dataPos, dlen)
	}
	return record{h: h, dataPos: dataPos, dataLen: dlen, next: dataPos + dlen}, nil
}

func (r *Reader) data(rec record) ([]byte, error) {
	if rec.dataLen > r.cfg.MaxRecordSize {
		return nil, fmt.Errorf("%w: record of %d bytes at offset %d is larger than the %d allowed", errFormat, rec.dataLen, rec.dataPos, r.cfg.MaxRecordSize)
	}
	return readFull(io.NewSectionReader(r.ra, rec.dataPos, rec.dataLen), uint64(rec.dataLen))
}

// readIndex reads the connection and chunk info records after index_pos.
func (r *Reader) readIndex() error {
	for pos := r.end; pos < r.size; {
		rec, err := r.recordAt(pos, r.size)
		if err != nil {
			return fmt.Errorf("reading the index: %w", err)
		}
		pos = rec.next
		op, err := rec.h.op()
		if err != nil {
			return err
		}
		switch op {
		case opConnection:
			d, err := r.data(rec)
			if err != nil {
				return err
			}
			c, err := parseConnection(rec.h, d)
			if err != nil {
				return err
			}
			r.conns[c.ID] = c
		case opChunkInfo:
			d, err := r.data(rec)
			if err != nil {
				return err
			}
			ci, err := parseChunkInfo(rec.h, d)
			if err != nil {
				return err
			}
			r.chunks = append(r.chunks, ci)
			for id, n := range ci.counts {
				if c, ok := r.conns[id]; ok {
					c.Count += uint64(n)
				}
			}
		}
	}
	return nil
}

func parseConnection(h header, data []byte) (*Connection, error) {
	id, err := h.u32("conn")
	if err != nil {
		return nil, err
	}
	topic, err := h.str("topic")
	if err != nil {
		return nil, err
	}
	ch, err := parseHeader(data)
	if err != nil {
		return nil, fmt.Errorf("connection %d (%s): %w", id, topic, err)
	}
	c := &Connection{ID: id, Topic: topic}
	if c.Type, err = ch.str("type"); err != nil {
		return nil, fmt.Errorf("connection %d (%s): %w", id, topic, err)
	}
	if c.MD5Sum, err = ch.str("md5sum"); err != nil {
		return nil, fmt.Errorf("connection %d (%s): %w", id, topic, err)
	}
	c.MessageDefinition = string(ch["message_definition"])
	c.CallerID = string(ch["callerid"])
	c.Latching = string(ch["latching"]) == "1"
	return c, nil
}

func parseChunkInfo(h header, data []byte) (chunkInfo, error) {
	var ci chunkInfo
	var err error
	if ci.pos, err = h.u64("chunk_pos"); err != nil {
		return ci, err
	}
	if ci.start, err = h.time("start_time"); err != nil {
		return ci, err
	}
	if ci.end, err = h.time("end_time"); err != nil {
		return ci, err
	}
	if len(data)%8 != 0 {
		return ci, fmt.Errorf("%w: chunk info data of %d bytes is not a list of (conn, count) pairs", errFormat, len(data))
	}
	ci.counts = map[uint32]uint32{}
	for i := 0; i+8 <= len(data); i += 8 {
		ci.counts[binary.LittleEndian.Uint32(data[i:])] += binary.LittleEndian.Uint32(data[i+4:])
	}
	return ci, nil
}

// Messages yields the messages on the given topics (all when none are
// given) in file order, which is recording order. It stops after yielding
// an error.
func (r *Reader) Messages(topics ...string) iter.Seq2[*Message, error] {
	var want map[string]bool
	if len(topics) > 0 {
		want = map[string]bool{}
		for _, t := range topics {
			want[t] = true
		}
	}
	return r.scan(want, false)
}

// PartialError ends the messages of a bag that could be read only in part:
// the file ends inside a record (cut short, or a recorder that died), its
// header points at an index beyond the end of the file, or chunks are
// corrupt. Every message before the damage, and in the readable chunks
// after it, was yielded; the fields say how much that was.
type PartialError struct {
	Messages      int   // messages yielded (of the topics asked for)
	Read          int64 // bytes of the file read and used
	Size          int64 // bytes in the file
	SkippedChunks int   // corrupt chunks skipped
	SkippedBytes  int64 // their size
	Err           error // the first problem found
}

func (e *PartialError) Error() string {
	msg := fmt.Sprintf("bag read only in part: %d messages from %d of its %d bytes", e.Messages, e.Read, e.Size)
	if e.SkippedChunks > 0 {
		msg += fmt.Sprintf(", %d corrupt chunks (%d bytes) skipped", e.SkippedChunks, e.SkippedBytes)
	}
	return msg + ": " + e.Err.Error()
}

func (e *PartialError) Unwrap() error { return e.Err }

// scan walks the chunk section. With learnOnly it only collects the
// connection records found in chunks (for unindexed bags) and yields
// nothing. A corrupt chunk is skipped (the record framing around it still
// holds); where the framing itself is lost, an indexed bag resumes at the
// next chunk its index lists and an unindexed one stops. Damage is reported
// once, after the last message, as a *PartialError.
func (r *Reader) scan(want map[string]bool, learnOnly bool) iter.Seq2[*Message, error] {
	return func(yield func(*Message, error) bool) {
		p := &PartialError{Size: r.size}
		stopped := false
		count := func(m *Message, err error) bool {
			if !yield(m, err) {
				stopped = true
				return false
			}
			p.Messages++
			return true
		}
		note := func(err error) {
			if p.Err == nil {
				p.Err = err
			}
		}
		pos := r.first
		for pos < r.end {
			rec, err := r.recordAt(pos, r.end)
			if err != nil {
				note(err)
				if part, ok := r.cutChunk(pos); ok {
					// The file ends inside an uncompressed chunk: its
					// records before the cut are still whole.
					_ = r.chunk(part, want, learnOnly, count)
					if stopped {
						return
					}
					pos = r.end
					break
				}
				next, ok := r.nextChunk(pos)
				if !ok {
					break
				}
				p.SkippedChunks++
				p.SkippedBytes += next - pos
				pos = next
				continue
			}
			op, err := rec.h.op()
			if err != nil {
				note(fmt.Errorf("record at offset %d: %w", pos, err))
				p.SkippedChunks++
				p.SkippedBytes += rec.next - pos
				pos = rec.next
				continue
			}
			if op == opChunk {
				if err := r.chunk(rec, want, learnOnly, count); err != nil {
					note(fmt.Errorf("chunk at offset %d: %w", rec.dataPos, err))
					p.SkippedChunks++
					p.SkippedBytes += rec.next - pos
				}
				if stopped {
					return
				}
			}
			pos = rec.next // index data and anything unknown are passed over
		}
		if r.cutAt > 0 && p.Err == nil {
			p.Err = fmt.Errorf("%w: the bag header puts the index at byte %d but the file has %d bytes: the file was cut short", errTruncated, r.cutAt, r.size)
		}
		if r.indexErr != nil && p.Err == nil {
			p.Err = fmt.Errorf("every chunk was read, but the index after them is cut short (%w)", r.indexErr)
		}
		if p.Err == nil || learnOnly {
			return
		}
		p.Read = min(pos, r.end) - p.SkippedBytes
		yield(nil, p)
	}
}

// cutChunk is the part of an uncompressed chunk record at pos that lies
// before the end of the file, when the file ends inside its data.
func (r *Reader) cutChunk(pos int64) (record, bool) {
	var n [4]byte
	if _, err := r.ra.ReadAt(n[:], pos); err != nil {
		return record{}, false
	}
	hlen := int64(binary.LittleEndian.Uint32(n[:]))
	dataPos := pos + 8 + hlen
	if hlen > r.cfg.MaxRecordSize || dataPos > r.end {
		return record{}, false
	}
	hb, err := readFull(io.NewSectionReader(r.ra, pos+4, hlen), uint64(hlen))
	if err != nil {
		return record{}, false
	}
	h, err := parseHeader(hb)
	if err != nil {
		return record{}, false
	}
	if op, err := h.op(); err != nil || op != opChunk {
		return record{}, false
	}
	if c, err := h.str("compression"); err != nil || c != "none" {
		return record{}, false
	}
	return record{h: h, dataPos: dataPos, dataLen: r.end - dataPos, next: r.end}, true
}

// nextChunk is the offset of the first chunk after pos that an indexed
// bag's index lists.
func (r *Reader) nextChunk(pos int64) (int64, bool) {
	if !r.indexed {
		return 0, false
	}
	next, ok := int64(0), false
	for _, c := range r.chunks {
		if p := int64(c.pos); p > pos && p < r.end && (!ok || p < next) {
			next, ok = p, true
		}
	}
	return next, ok
}

// chunk reads the records of one chunk and yields its messages; it returns
// what made the chunk unreadable, if anything. It also stops when yield
// returns false.
func (r *Reader) chunk(rec record, want map[string]bool, learnOnly bool, yield func(*Message, error) bool) error {
	comp, err := rec.h.str("compression")
	if err != nil {
		return err
	}
	size, err := rec.h.u32("size")
	if err != nil {
		return err
	}
	var src io.Reader = io.NewSectionReader(r.ra, rec.dataPos, rec.dataLen)
	switch comp {
	case "none":
	case "bz2":
		src = bzip2.NewReader(bufio.NewReaderSize(src, 64*1024))
	case "lz4":
		src = newLZ4Reader(bufio.NewReaderSize(src, 64*1024))
	default:
		return fmt.Errorf("%w: unknown chunk compression %q", errFormat, comp)
	}
	cr := bufio.NewReaderSize(io.LimitReader(src, int64(size)), 64*1024)
	left := int64(size)
	for {
		var n [4]byte
		if _, err := io.ReadFull(cr, n[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil // chunk ends on a record boundary
			}
			return fmt.Errorf("%w: reading a record length: %w", errFormat, err)
		}
		hlen := int64(binary.LittleEndian.Uint32(n[:]))
		if hlen+8 > left || hlen > r.cfg.MaxRecordSize {
			return fmt.Errorf("%w: record header of %d bytes overruns the chunk", errFormat, hlen)
		}
		hb, err := readFull(cr, uint64(hlen))
		if err != nil {
			return fmt.Errorf("%w: reading a record header: %w", errFormat, err)
		}
		if _, err := io.ReadFull(cr, n[:]); err != nil {
			return fmt.Errorf("%w: reading a record length: %w", errFormat, err)
		}
		dlen := int64(binary.LittleEndian.Uint32(n[:]))
		left -= 8 + hlen
		if dlen > left || dlen > r.cfg.MaxRecordSize {
			return fmt.Errorf("%w: record of %d bytes overruns the chunk", errFormat, dlen)
		}
		left -= dlen
		h, err := parseHeader(hb)
		if err != nil {
			return err
		}
		op, err := h.op()
		if err != nil {
			return err
		}
		var m *Message
		switch op {
		case opConnection:
			d, err := readFull(cr, uint64(dlen))
			if err != nil {
				return fmt.Errorf("%w: reading a connection record: %w", errFormat, err)
			}
			c, err := parseConnection(h, d)
			if err != nil {
				return err
			}
			// Only an unindexed bag learns connections here (during Open);
			// afterwards iteration never writes to the Reader, so several
			// iterations may run at once.
			if _, known := r.conns[c.ID]; !known && !r.indexed && learnOnly {
				r.conns[c.ID] = c
			}
			continue
		case opMessageData:
			if learnOnly {
				break
			}
			id, err := h.u32("conn")
			if err != nil {
				return err
			}
			t, err := h.time("time")
			if err != nil {
				return err
			}
			c, ok := r.conns[id]
			if !ok {
				return fmt.Errorf("%w: message refers to connection %d, which the bag never defines", errFormat, id)
			}
			if want != nil && !want[c.Topic] {
				break
			}
			d, err := readFull(cr, uint64(dlen))
			if err != nil {
				return fmt.Errorf("%w: reading a message: %w", errFormat, err)
			}
			m = &Message{Conn: c, Topic: c.Topic, Type: c.Type, Time: t.Time(), Data: d}
		}
		if m == nil {
			if _, err := io.CopyN(io.Discard, cr, dlen); err != nil {
				return fmt.Errorf("%w: skipping a record: %w", errFormat, err)
			}
			continue
		}
		if !yield(m, nil) {
			return nil
		}
	}
}

// Decode deserialises the message into into, a pointer to a goroslib message
// struct of the same ROS type and md5sum (for example *sensor_msgs.Image).
// into is overwritten. goroslib refuses messages over 16 MiB.
func (m *Message) Decode(into any) error {
	v := reflect.ValueOf(into)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("decoding %s from %s: destination %T is not a pointer to a message struct", m.Type, m.Topic, into)
	}
	typ, err := msgproc.Type(v.Elem().Interface())
	if err != nil {
		return fmt.Errorf("decoding %s from %s: %w", m.Type, m.Topic, err)
	}
	if typ != m.Type {
		return fmt.Errorf("message on %s is a %s; cannot decode it into %s", m.Topic, m.Type, typ)
	}
	if m.Conn != nil && m.Conn.MD5Sum != "*" {
		md5, err := msgproc.MD5(v.Elem().Interface())
		if err != nil {
			return fmt.Errorf("decoding %s from %s: %w", m.Type, m.Topic, err)
		}
		if md5 != m.Conn.MD5Sum {
			return fmt.Errorf("message on %s is a %s with md5sum %s, but the Go type has %s: the definitions differ", m.Topic, m.Type, m.Conn.MD5Sum, md5)
		}
	}
	// goroslib reuses slices that have room without resizing them; start clean.
	v.Elem().SetZero()
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(m.Data)))
	if err := protocommon.MessageDecode(io.MultiReader(bytes.NewReader(n[:]), bytes.NewReader(m.Data)), into); err != nil {
		return fmt.Errorf("decoding %s from %s: %w", m.Type, m.Topic, err)
	}
	return nil
}
