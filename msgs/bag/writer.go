package bag

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgproc"
	"github.com/bluenviron/goroslib/v2/pkg/protocommon"

	"github.com/lingbotmap/lingbotmap/internal/atomicfile"
)

// WriterConfig tunes a Writer. The zero value gives the defaults.
type WriterConfig struct {
	// ChunkSize is the uncompressed size at which a chunk is closed and
	// written out. (optional) It defaults to 768 KiB, rosbag record's default.
	ChunkSize int
	// CallerID is stored in every connection header as the recording node.
	// (optional) It defaults to "/lingbotmap_bag".
	CallerID string
}

func (c WriterConfig) withDefaults() WriterConfig {
	if c.ChunkSize <= 0 {
		c.ChunkSize = 768 * 1024
	}
	if c.CallerID == "" {
		c.CallerID = "/lingbotmap_bag"
	}
	return c
}

// Writer writes an uncompressed, indexed ROS bag 2.0. Messages are buffered
// one chunk at a time; the index is written by Close, which must be called.
// The bag is written whole or not at all: it grows in a hidden temporary
// file beside the destination (".NAME.…", package atomicfile), and Close syncs it and renames
// it into place; Abort discards it. A crash leaves only the temporary file,
// an unindexed bag that `rosbag reindex` or Reader can still read.
// A Writer is not safe for concurrent use.
type Writer struct {
	cfg    WriterConfig
	path   string // the destination; f is the temporary file
	f      *atomicfile.File
	pos    int64 // file offset of the next record
	conns  []*writerConn
	byKey  map[connKey]*writerConn
	chunks []chunkInfo
	closed bool

	// the open chunk
	chunk      []byte
	chunkStart rosTime
	chunkEnd   rosTime
	chunkIndex map[uint32][]indexEntry // per connection: time and offset in chunk
}

type connKey struct{ topic, typ string }

type writerConn struct {
	id     uint32
	topic  string
	header []byte // the encoded connection header (record data)
	typ    string
}

type indexEntry struct {
	t      rosTime
	offset uint32
}

type chunkInfo struct {
	pos        uint64
	start, end rosTime
	counts     map[uint32]uint32
}

// Create starts a bag file with the default configuration; Close puts it
// at path (replacing any file there).
func Create(path string) (*Writer, error) { return WriterConfig{}.Create(path) }

// Create starts a bag file with this configuration; Close puts it at path
// (replacing any file there).
func (c WriterConfig) Create(path string) (*Writer, error) {
	f, err := atomicfile.Create(path)
	if err != nil {
		return nil, fmt.Errorf("creating bag: %w", err)
	}
	w := &Writer{cfg: c.withDefaults(), path: path, f: f, byKey: map[connKey]*writerConn{}, chunkIndex: map[uint32][]indexEntry{}}
	// A header with index_pos 0 marks the bag as unindexed until Close
	// rewrites it, so a crash leaves a bag `rosbag reindex` can repair.
	if err := w.writeAt(0, append([]byte(magic), bagHeaderRecord(0, 0, 0)...)); err != nil {
		f.Abort()
		return nil, fmt.Errorf("creating bag %s: %w", path, err)
	}
	return w, nil
}

func bagHeaderRecord(indexPos uint64, conns, chunks uint32) []byte {
	h := encodeHeader(u8Field("op", opBagHeader), u64Field("index_pos", indexPos),
		u32Field("conn_count", conns), u32Field("chunk_count", chunks))
	pad := bytes.Repeat([]byte{' '}, max(bagHeaderPadding-len(h), 0))
	return appendRecord(nil, h, pad)
}

func (w *Writer) writeAt(off int64, b []byte) error {
	if _, err := w.f.WriteAt(b, off); err != nil {
		return fmt.Errorf("writing bag %s: %w", w.path, err)
	}
	if end := off + int64(len(b)); end > w.pos {
		w.pos = end
	}
	return nil
}

// Write appends msg, a goroslib message (struct or pointer to struct, such as
// *sensor_msgs.Image), on topic with record time t. The connection (topic,
// type, md5sum, definition) is derived from the Go type.
func (w *Writer) Write(topic string, t time.Time, msg any) error {
	if w.closed {
		return errors.New("bag writer is closed")
	}
	if topic == "" {
		return errors.New("bag topic is empty")
	}
	rt, err := toRosTime(t)
	if err != nil {
		return err
	}
	v := reflect.ValueOf(msg)
	if v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return fmt.Errorf("bag message for %s is a %T; want a goroslib message struct or pointer to one", topic, msg)
	}
	typ, err := msgproc.Type(v.Interface())
	if err != nil {
		return fmt.Errorf("bag message type of %T: %w", msg, err)
	}
	conn, ok := w.byKey[connKey{topic, typ}]
	if !ok {
		if conn, err = w.newConn(topic, typ, v.Interface()); err != nil {
			return err
		}
	}
	ptr := reflect.New(v.Type())
	ptr.Elem().Set(v)
	var buf bytes.Buffer
	if err := protocommon.MessageEncode(&buf, ptr.Interface()); err != nil {
		return fmt.Errorf("serialising %s message for %s: %w", typ, topic, err)
	}
	return w.writeMessage(conn, rt, buf.Bytes()[4:]) // drop the length prefix
}

func (w *Writer) newConn(topic, typ string, msg any) (*writerConn, error) {
	md5, err := msgproc.MD5(msg)
	if err != nil {
		return nil, fmt.Errorf("md5sum of %s: %w", typ, err)
	}
	def, err := msgproc.Definition(msg)
	if err != nil {
		return nil, fmt.Errorf("message definition of %s: %w", typ, err)
	}
	c := &writerConn{
		id:    uint32(len(w.conns)),
		topic: topic,
		typ:   typ,
		header: encodeHeader(strField("callerid", w.cfg.CallerID), strField("latching", "0"),
			strField("md5sum", md5), strField("message_definition", def),
			strField("topic", topic), strField("type", typ)),
	}
	w.conns = append(w.conns, c)
	w.byKey[connKey{topic, typ}] = c
	// The connection record also goes into the chunk that first uses it, as
	// rosbag does, so the chunks alone are enough to rebuild the index.
	w.chunk = appendRecord(w.chunk, c.recordHeader(), c.header)
	return c, nil
}

func (c *writerConn) recordHeader() []byte {
	return encodeHeader(u8Field("op", opConnection), u32Field("conn", c.id), strField("topic", c.topic))
}

func (w *Writer) writeMessage(c *writerConn, t rosTime, data []byte) error {
	if uint64(len(data)) > 1<<32-64 {
		return fmt.Errorf("message on %s is %d bytes, too large for a bag record", c.topic, len(data))
	}
	if len(w.chunkIndex) == 0 {
		w.chunkStart, w.chunkEnd = t, t
	}
	w.chunkStart = minTime(w.chunkStart, t)
	if w.chunkEnd.before(t) {
		w.chunkEnd = t
	}
	w.chunkIndex[c.id] = append(w.chunkIndex[c.id], indexEntry{t, uint32(len(w.chunk))})
	h := encodeHeader(u8Field("op", opMessageData), u32Field("conn", c.id), timeField("time", t))
	w.chunk = appendRecord(w.chunk, h, data)
	if len(w.chunk) >= w.cfg.ChunkSize {
		return w.flushChunk()
	}
	return nil
}

func minTime(a, b rosTime) rosTime {
	if b.before(a) {
		return b
	}
	return a
}

// flushChunk writes the open chunk and its index data records.
func (w *Writer) flushChunk() error {
	if len(w.chunkIndex) == 0 {
		return nil // nothing but perhaps a connection record; it rides with the next chunk
	}
	info := chunkInfo{pos: uint64(w.pos), start: w.chunkStart, end: w.chunkEnd, counts: map[uint32]uint32{}}
	h := encodeHeader(u8Field("op", opChunk), strField("compression", "none"), u32Field("size", uint32(len(w.chunk))))
	out := appendRecord(nil, h, w.chunk)
	ids := make([]uint32, 0, len(w.chunkIndex))
	for id := range w.chunkIndex {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		entries := w.chunkIndex[id]
		info.counts[id] = uint32(len(entries))
		var data []byte
		for _, e := range entries {
			data = append(data, e.t.bytes()...)
			data = appendU32(data, e.offset)
		}
		ih := encodeHeader(u8Field("op", opIndexData), u32Field("ver", 1), u32Field("conn", id), u32Field("count", uint32(len(entries))))
		out = appendRecord(out, ih, data)
	}
	if err := w.writeAt(w.pos, out); err != nil {
		return err
	}
	w.chunks = append(w.chunks, info)
	w.chunk = w.chunk[:0]
	clear(w.chunkIndex)
	return nil
}

func appendU32(b []byte, v uint32) []byte {
	return append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
}

// Close writes the last chunk, the connection and chunk info records, and
// the final bag header, syncs the file and renames it to its path. When
// any step fails, no file appears at the path.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	if err := w.finish(); err != nil {
		w.f.Abort()
		return err
	}
	if err := w.f.Commit(); err != nil {
		return fmt.Errorf("closing bag: %w", err)
	}
	return nil
}

// Abort discards the bag: nothing appears at its path. It does nothing
// after Close.
func (w *Writer) Abort() error {
	if w.closed {
		return nil
	}
	w.closed = true
	return w.f.Abort()
}

func (w *Writer) finish() error {
	if err := w.flushChunk(); err != nil {
		return err
	}
	indexPos := uint64(w.pos)
	var out []byte
	for _, c := range w.conns {
		out = appendRecord(out, c.recordHeader(), c.header)
	}
	for _, ci := range w.chunks {
		ids := make([]uint32, 0, len(ci.counts))
		for id := range ci.counts {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		var data []byte
		for _, id := range ids {
			data = appendU32(appendU32(data, id), ci.counts[id])
		}
		h := encodeHeader(u8Field("op", opChunkInfo), u32Field("ver", 1), u64Field("chunk_pos", ci.pos),
			timeField("start_time", ci.start), timeField("end_time", ci.end), u32Field("count", uint32(len(ids))))
		out = appendRecord(out, h, data)
	}
	if err := w.writeAt(w.pos, out); err != nil {
		return err
	}
	if err := w.writeAt(int64(len(magic)), bagHeaderRecord(indexPos, uint32(len(w.conns)), uint32(len(w.chunks)))); err != nil {
		return err
	}
	return nil
}
