// Package mcapbag writes and reads ROS 2 bags in MCAP, rosbag2's default
// storage format since Iron: profile "ros2", one schema per message type
// (encoding "ros2msg": the .msg text with its dependencies), one channel per
// topic with message encoding "cdr" and the publisher's QoS in the channel
// metadata "offered_qos_profiles" with the type's REP 2011 hash in
// "topic_type_hash", and the rosbag2 metadata record (the bag's metadata
// YAML), as rosbag2_storage_mcap writes them, so that `ros2 bag info` shows
// the topics, counts and type hashes of the file alone. Messages are encoded
// and decoded by msgs/cdr.
package mcapbag

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"time"

	"github.com/foxglove/mcap/go/mcap"

	"github.com/lingbotmap/lingbotmap/internal/atomicfile"
	"github.com/lingbotmap/lingbotmap/msgs/cdr"
	"github.com/lingbotmap/lingbotmap/msgs/rosbag2/metadata"
)

// Profile, SchemaEncoding and MessageEncoding are the MCAP identifiers of a
// ROS 2 bag.
const (
	Profile         = "ros2"
	SchemaEncoding  = "ros2msg"
	MessageEncoding = "cdr"
)

// ReliableQoS is the offered_qos_profiles metadata of a reliable, volatile
// keep-last publisher of depth 10, in the YAML of rosbag2's metadata version
// 9 (Jazzy), which names the policies; "infinite" durations are
// RMW_DURATION_INFINITE as sec and nsec. The rosbag2 metadata record says
// version 9, so a profile set with SetQoS must use names too.
const ReliableQoS = `- history: keep_last
  depth: 10
  reliability: reliable
  durability: volatile
  deadline:
    sec: 9223372036
    nsec: 854775807
  lifespan:
    sec: 9223372036
    nsec: 854775807
  liveliness: automatic
  liveliness_lease_duration:
    sec: 9223372036
    nsec: 854775807
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
	// first and last log times (ns) of the messages written, for the
	// rosbag2 metadata record
	first, last uint64
	count       uint64
}

type channel struct {
	topic string
	id    uint16
	typ   string
	hash  string // REP 2011 type hash
	seq   uint32
	qos   string
	used  bool
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
	if w.count == 0 || ns < w.first {
		w.first = ns
	}
	w.last = max(w.last, ns)
	w.count++
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
	c.topic, c.id, c.typ, c.hash, c.used = topic, uint16(used), ty.Name, ty.Hash, true
	err := w.w.WriteChannel(&mcap.Channel{ID: c.id, SchemaID: sid, Topic: topic, MessageEncoding: MessageEncoding,
		Metadata: map[string]string{"offered_qos_profiles": c.qos, "topic_type_hash": c.hash}})
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
	err := w.writeBagMetadata()
	if err == nil {
		err = w.w.Close()
	}
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

// writeBagMetadata writes the rosbag2 metadata record: the bag's metadata
// as rosbag2 would put it in metadata.yaml (storage mcap, this one file,
// each topic with its QoS, type hash and count), which rosbag2_storage_mcap
// reads back when the file is opened without a bag directory.
func (w *Writer) writeBagMetadata() error {
	m := &metadata.Metadata{
		Version:           metadata.Version,
		StorageIdentifier: metadata.StorageMCAP,
		MessageCount:      w.count,
		RelativeFilePaths: []string{filepath.Base(w.path)},
		ROSDistro:         "jazzy", // the layout written is Jazzy's (version 9)
	}
	if w.count > 0 {
		m.StartingTime.NanosecondsSinceEpoch = int64(w.first)
		m.Duration.Nanoseconds = int64(w.last - w.first)
	} else {
		m.StartingTime.NanosecondsSinceEpoch = math.MaxInt64 // rosbag2's start of an empty bag
	}
	counts := w.w.Statistics.ChannelMessageCounts
	var chans []*channel
	for _, c := range w.channels {
		if c.used {
			chans = append(chans, c)
		}
	}
	slices.SortFunc(chans, func(a, b *channel) int { return int(a.id) - int(b.id) })
	for _, c := range chans {
		m.Topics = append(m.Topics, metadata.TopicInformation{
			Topic: metadata.TopicMetadata{Name: c.topic, Type: c.typ, SerializationFormat: MessageEncoding,
				OfferedQoSProfiles: metadata.QoSProfiles(c.qos), TypeDescriptionHash: c.hash},
			MessageCount: counts[c.id],
		})
	}
	m.Files = []metadata.FileInformation{{Path: m.RelativeFilePaths[0], StartingTime: m.StartingTime, Duration: m.Duration, MessageCount: m.MessageCount}}
	yaml, err := m.Marshal()
	if err != nil {
		return err
	}
	if err := w.w.WriteMetadata(&mcap.Metadata{Name: "rosbag2", Metadata: map[string]string{"serialized_metadata": string(yaml)}}); err != nil {
		return fmt.Errorf("writing the rosbag2 metadata record: %w", err)
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
