// Package metadata reads and writes rosbag2's bag metadata: a bag
// directory's metadata.yaml, and the serialized_metadata of the rosbag2
// metadata record in an MCAP file and of a .db3 file's metadata table. It
// is a leaf, so that both the MCAP writer (msgs/mcapbag) and the bag reader
// (msgs/rosbag2) use it.
package metadata

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// File is the name of a bag directory's metadata.
const File = "metadata.yaml"

// Storage identifiers of the formats read.
const (
	StorageMCAP    = "mcap"
	StorageSQLite3 = "sqlite3"
)

// Compression modes (metadata.yaml's compression_mode, compared without
// case: rosbag2 writes "FILE" and "MESSAGE", its CLI takes "file" and
// "message") and the one compression format rosbag2 ships.
const (
	CompressionNone    = ""
	CompressionFile    = "file"
	CompressionMessage = "message"
	CompressionZstd    = "zstd"
)

// Version is the version of the metadata written: Jazzy's, whose
// QoS profiles use names ("reliable") rather than numbers.
const Version = 9

// Metadata is a bag's metadata.yaml (the map under
// rosbag2_bagfile_information), or the serialized_metadata of an MCAP file's
// rosbag2 metadata record.
type Metadata struct {
	Version           int                `yaml:"version"`
	StorageIdentifier string             `yaml:"storage_identifier"`
	Duration          Duration           `yaml:"duration"`
	StartingTime      Time               `yaml:"starting_time"`
	MessageCount      uint64             `yaml:"message_count"`
	Topics            []TopicInformation `yaml:"topics_with_message_count"`
	CompressionFormat string             `yaml:"compression_format"`
	CompressionMode   string             `yaml:"compression_mode"`
	RelativeFilePaths []string           `yaml:"relative_file_paths"`
	Files             []FileInformation  `yaml:"files"`
	CustomData        map[string]string  `yaml:"custom_data"`
	ROSDistro         string             `yaml:"ros_distro"`
}

// Duration is a length of time in nanoseconds.
type Duration struct {
	Nanoseconds int64 `yaml:"nanoseconds"`
}

// Time is a time in nanoseconds since the Unix epoch.
type Time struct {
	NanosecondsSinceEpoch int64 `yaml:"nanoseconds_since_epoch"`
}

// TopicInformation is one topic and its message count.
type TopicInformation struct {
	Topic        TopicMetadata `yaml:"topic_metadata"`
	MessageCount uint64        `yaml:"message_count"`
}

// TopicMetadata describes a topic as recorded.
type TopicMetadata struct {
	Name                string `yaml:"name"`
	Type                string `yaml:"type"`
	SerializationFormat string `yaml:"serialization_format"`
	// OfferedQoSProfiles is the YAML list of the publishers' QoS profiles,
	// as text (version 9 stores a list, earlier versions a string of YAML).
	OfferedQoSProfiles  QoSProfiles `yaml:"offered_qos_profiles"`
	TypeDescriptionHash string      `yaml:"type_description_hash,omitempty"`
}

// FileInformation describes one split file.
type FileInformation struct {
	Path         string   `yaml:"path"`
	StartingTime Time     `yaml:"starting_time"`
	Duration     Duration `yaml:"duration"`
	MessageCount uint64   `yaml:"message_count"`
}

// QoSProfiles is a YAML list of QoS profiles kept as text, the form MCAP
// channel metadata and .db3 topics hold it in.
type QoSProfiles string

// UnmarshalYAML takes a list (version 9) or a string holding one (earlier
// versions).
func (q *QoSProfiles) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*q = QoSProfiles(n.Value)
		return nil
	case yaml.SequenceNode:
		b, err := yaml.Marshal(n)
		if err != nil {
			return err
		}
		*q = QoSProfiles(strings.TrimSuffix(string(b), "\n"))
		return nil
	}
	return fmt.Errorf("line %d: offered_qos_profiles is neither a list nor a string", n.Line)
}

// MarshalYAML writes the profiles as a list, as version 9 does.
func (q QoSProfiles) MarshalYAML() (any, error) {
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(q), &n); err != nil {
		return nil, fmt.Errorf("offered_qos_profiles: %w", err)
	}
	if len(n.Content) == 0 {
		return []any{}, nil
	}
	if n.Content[0].Kind != yaml.SequenceNode {
		return nil, errors.New("offered_qos_profiles is not a YAML list")
	}
	return n.Content[0], nil
}

// Parse parses a metadata.yaml (a map under
// rosbag2_bagfile_information) or the bare map of an MCAP metadata record,
// and checks what a reader relies on.
func Parse(b []byte) (*Metadata, error) {
	var top map[string]yaml.Node
	if err := yaml.Unmarshal(b, &top); err != nil {
		return nil, fmt.Errorf("not YAML: %w", err)
	}
	m := &Metadata{}
	if n, ok := top["rosbag2_bagfile_information"]; ok {
		if err := n.Decode(m); err != nil {
			return nil, err
		}
	} else if _, ok := top["storage_identifier"]; ok {
		if err := yaml.Unmarshal(b, m); err != nil {
			return nil, err
		}
	} else {
		return nil, errors.New("no rosbag2_bagfile_information")
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Metadata) check() error {
	var errs []error
	if m.Version < 1 {
		errs = append(errs, fmt.Errorf("version %d is not a rosbag2 metadata version", m.Version))
	}
	if m.StorageIdentifier == "" {
		errs = append(errs, errors.New("no storage_identifier"))
	}
	seen := map[string]bool{}
	for i, t := range m.Topics {
		switch {
		case t.Topic.Name == "":
			errs = append(errs, fmt.Errorf("topic %d has no name", i))
		case t.Topic.Type == "":
			errs = append(errs, fmt.Errorf("topic %s has no type", t.Topic.Name))
		case seen[t.Topic.Name]:
			errs = append(errs, fmt.Errorf("topic %s is listed twice", t.Topic.Name))
		}
		seen[t.Topic.Name] = true
	}
	if _, err := m.Compression(); err != nil {
		errs = append(errs, err)
	}
	for _, p := range m.RelativeFilePaths {
		if p == "" || filepath.IsAbs(p) || strings.HasPrefix(filepath.Clean(p), "..") {
			errs = append(errs, fmt.Errorf("relative_file_paths: %q is not a path inside the bag", p))
		}
	}
	return errors.Join(errs...)
}

// Compression is the bag's compression mode (CompressionNone, File or
// Message), refusing modes and formats rosbag2 does not have.
func (m *Metadata) Compression() (string, error) {
	mode := strings.ToLower(m.CompressionMode)
	switch mode {
	case "", "none":
		return CompressionNone, nil
	case CompressionFile, CompressionMessage:
	default:
		return "", fmt.Errorf("compression_mode %q is not none, file or message", m.CompressionMode)
	}
	if !strings.EqualFold(m.CompressionFormat, CompressionZstd) {
		return "", fmt.Errorf("compression_format %q is not supported (zstd is rosbag2's only compressor)", m.CompressionFormat)
	}
	return mode, nil
}

// Topic is the metadata of a topic, or nil.
func (m *Metadata) Topic(name string) *TopicInformation {
	for i := range m.Topics {
		if m.Topics[i].Topic.Name == name {
			return &m.Topics[i]
		}
	}
	return nil
}

// Marshal writes the bare map, as an MCAP file's rosbag2 metadata record
// holds it; MarshalFile writes metadata.yaml.
func (m *Metadata) Marshal() ([]byte, error) { return encodeYAML(m) }

// MarshalFile writes the metadata as metadata.yaml.
func (m *Metadata) MarshalFile() ([]byte, error) {
	return encodeYAML(map[string]*Metadata{"rosbag2_bagfile_information": m})
}

func encodeYAML(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("rosbag2 metadata: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("rosbag2 metadata: %w", err)
	}
	return buf.Bytes(), nil
}

// Read reads and parses dir/metadata.yaml.
func Read(dir string) (*Metadata, error) {
	p := filepath.Join(dir, File)
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	m, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return m, nil
}
