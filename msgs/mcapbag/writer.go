// Package mcapbag writes and reads ROS 2 bags in MCAP, rosbag2's default
// storage format since Iron: profile "ros2", one schema per message type
// (encoding "ros2msg": the .msg text with its dependencies), one channel per
// topic with message encoding "cdr" and the publisher's QoS in the channel
// metadata "offered_qos_profiles", as rosbag2_storage_mcap writes them.
// Messages are encoded and decoded by msgs/cdr.
package mcapbag

import (
	"bufio"
	"errors"
	"fmt"
	"time"

	"github.com/foxglove/mcap/go/mcap"

	"github.com/lingbotmap/lingbotmap/internal/atomicfile"
	"github.com/lingbotmap/lingbotmap/msgs/cdr"
)

// Profile, SchemaEncoding and MessageEncoding are the MCAP identifiers of a
// ROS 2 bag.
const (
	Profile         = "ros2"
	SchemaEncoding  = "ros2msg"
	MessageEncoding = "cdr"
)

// ReliableQoS is the offered_qos_profiles metadata of a reliable, volatile
// keep-last publisher, in the YAML rosbag2 (Humble) writes; "infinite"
// durations are its sec/nsec maxima.
const ReliableQoS = `- history: 3
  depth: 0
  reliability: 1
  durability: 2
  deadline:
    sec: 2147483647
    nsec: 4294967295
  lifespan:
    sec: 2147483647
    nsec: 4294967295
  liveliness: 1
  liveliness_lease_duration:
    sec: 2147483647
    nsec: 4294967295
  avoid_ros_namespace_conventions: false
`

// Writer writes messages to a new MCAP file, zstd-compressed in chunks and
// indexed, so readers can seek by topic and time.
type Writer struct {
	path     string           // where Close puts the file
	f        *atomicfile.File // the temporary file being written
	buf      *bufio.Writer
	w        *mcap.Writer
	schemas  map[string]uint16 // ROS 2 type name → schema id
	channels map[string]*channel
	closed   bool
}

type channel struct {
	id   uint16
	typ  string
	seq  uint32
	qos  string
	used bool
}

// Create starts the MCAP file and writes its header. The file is written
// beside path under a temporary name; Close puts it at path (replacing any
// file there), Abort discards it, so a bag at path is always complete.
func Create(path string) (*Writer, error) {
	f, err := atomicfile.Create(path)
	if err != nil {
		return nil, fmt.Errorf("creating the MCAP bag: %w", err)
	}
	buf := bufio.NewWriterSize(f, 1<<20)
	w, err := mcap.NewWriter(buf, &mcap.WriterOptions{
		IncludeCRC:  true,
		Chunked:     true,
		ChunkSize:   4 << 20,
		Compression: mcap.CompressionZSTD,
	})
	if err == nil {
		err = w.WriteHeader(&mcap.Header{Profile: Profile, Library: "lingbotmap"})
	}
	if err != nil {
		f.Abort()
		return nil, fmt.Errorf("starting the MCAP bag %s: %w", path, err)
	}
	return &Writer{path: path, f: f, buf: buf, w: w, schemas: map[string]uint16{}, channels: map[string]*channel{}}, nil
}

// SetQoS sets the offered_qos_profiles metadata of topic (YAML as rosbag2
// writes it) before its first message; the default is ReliableQoS.
func (w *Writer) SetQoS(topic, yaml string) error {
	c := w.channels[topic]
	if c != nil && c.used {
		return fmt.Errorf("topic %s: QoS must be set before its first message", topic)
	}
	if c == nil {
		c = &channel{}
		w.channels[topic] = c
	}
	c.qos = yaml
	return nil
}

// Write encodes msg (a type msgs/cdr knows) as CDR and appends it on topic,
// logged and published at t. The first message of a topic fixes its type.
func (w *Writer) Write(topic string, t time.Time, msg any) error {
	if w.closed {
		return errors.New("MCAP bag is closed")
	}
	ty, err := cdr.TypeOf(msg)
	if err != nil {
		return err
	}
	c, err := w.channel(topic, ty)
	if err != nil {
		return err
	}
	data, err := cdr.Marshal(msg)
	if err != nil {
		return fmt.Errorf("topic %s: %w", topic, err)
	}
	if t.Before(time.Unix(0, 0)) {
		return fmt.Errorf("topic %s: log time %v is before 1970", topic, t)
	}
	ns := uint64(t.UnixNano())
	c.seq++
	if err := w.w.WriteMessage(&mcap.Message{ChannelID: c.id, Sequence: c.seq, LogTime: ns, PublishTime: ns, Data: data}); err != nil {
		return fmt.Errorf("writing a message on %s: %w", topic, err)
	}
	return nil
}

func (w *Writer) channel(topic string, ty cdr.Type) (*channel, error) {
	c := w.channels[topic]
	if c != nil && c.used {
		if c.typ != ty.Name {
			return nil, fmt.Errorf("topic %s carries %s, not %s", topic, c.typ, ty.Name)
		}
		return c, nil
	}
	if c == nil {
		c = &channel{}
		w.channels[topic] = c
	}
	if c.qos == "" {
		c.qos = ReliableQoS
	}
	sid, ok := w.schemas[ty.Name]
	if !ok {
		sid = uint16(len(w.schemas) + 1) // 0 means "no schema"
		if err := w.w.WriteSchema(&mcap.Schema{ID: sid, Name: ty.Name, Encoding: SchemaEncoding, Data: []byte(ty.Schema)}); err != nil {
			return nil, fmt.Errorf("writing the schema of %s: %w", ty.Name, err)
		}
		w.schemas[ty.Name] = sid
	}
	used := 0
	for _, other := range w.channels {
		if other.used {
			used++
		}
	}
	c.id, c.typ, c.used = uint16(used), ty.Name, true
	err := w.w.WriteChannel(&mcap.Channel{ID: c.id, SchemaID: sid, Topic: topic, MessageEncoding: MessageEncoding,
		Metadata: map[string]string{"offered_qos_profiles": c.qos}})
	if err != nil {
		return nil, fmt.Errorf("writing the channel of %s: %w", topic, err)
	}
	return c, nil
}

// Close writes the summary (index, statistics), syncs the file and renames
// it to its path. When any step fails, no file appears at the path.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	err := w.w.Close()
	if ferr := w.buf.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		w.f.Abort()
	} else {
		err = w.f.Commit()
	}
	if err != nil {
		return fmt.Errorf("closing the MCAP bag: %w", err)
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
