// Package rosbag2 reads ROS 2 bags as rosbag2 writes them: a bag directory
// (metadata.yaml and its split files, in order), or one storage file alone,
// in either storage rosbag2 ships (MCAP, Jazzy's default, and sqlite3 .db3,
// Humble's), with no, per-message or per-file zstd compression. Messages come
// out as msgs/mcapbag messages, so the bag's storage does not matter to a
// reader.
package rosbag2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lingbotmap/lingbotmap/msgs/mcapbag"
	"github.com/lingbotmap/lingbotmap/msgs/rosbag2/metadata"
)

// Names of metadata, re-exported for the bag's users.
const (
	MetadataFile       = metadata.File
	StorageMCAP        = metadata.StorageMCAP
	StorageSQLite3     = metadata.StorageSQLite3
	CompressionNone    = metadata.CompressionNone
	CompressionFile    = metadata.CompressionFile
	CompressionMessage = metadata.CompressionMessage
)

// Metadata is a bag's metadata.yaml.
type Metadata = metadata.Metadata

// PartialError says that a bag was read only in part: split files missing or
// unreadable, or fewer messages than its metadata.yaml counts. The messages
// that could be read were all delivered before it.
type PartialError struct {
	Path     string
	Problems []string
}

func (e *PartialError) Error() string {
	return fmt.Sprintf("rosbag2 bag %s read only in part: %s", e.Path, strings.Join(e.Problems, "; "))
}

// fileChannel is a topic as one storage file has it.
type fileChannel struct {
	Topic, Type, Encoding, QoS, Hash string
	Count                            uint64
}

// fileMessage is a message as one storage file has it.
type fileMessage struct {
	Topic                string
	Sequence             uint32
	LogTime, PublishTime time.Time
	Data                 []byte
}

// storageFile is one opened split file.
type storageFile interface {
	channels() []fileChannel
	messages(ctx context.Context, topics []string) iter.Seq2[fileMessage, error]
	close() error
}

// split is one file of a bag, in the order the bag lists them.
type split struct {
	name    string // as metadata.yaml lists it
	path    string // on disk
	storage string // StorageMCAP or StorageSQLite3
	temp    string // decompressed copy (file compression), removed by Close
	f       storageFile
	problem string // why it cannot be read ("" when it can)
}

// Bag is an opened rosbag2 bag.
type Bag struct {
	path     string
	meta     *Metadata // nil for a storage file or directory without metadata.yaml
	mode     string    // compression mode
	splits   []*split
	channels []*mcapbag.Channel
	byTopic  map[string]*mcapbag.Channel
	warnings []string
	short    map[string]string // topic → how its messages fall short of the metadata
	zstd     *zstdDecoder
}

// Open opens a bag: a directory (with metadata.yaml, or else the .mcap and
// .db3 files in it, ordered by their split index), a metadata.yaml, or one
// .mcap or .db3 file. It checks metadata.yaml against the files: a storage
// identifier, topic type or compression that disagrees is an error; a split
// file missing or unreadable, or fewer messages than the metadata counts, is
// reported by the *PartialError that ends Messages (Open fails only when no
// file can be read); more messages or topics than the metadata lists are
// Warnings.
func Open(path string) (*Bag, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("rosbag2 bag: %w", err)
	}
	b := &Bag{path: path, byTopic: map[string]*mcapbag.Channel{}, short: map[string]string{}}
	dir := path
	switch {
	case st.IsDir():
	case filepath.Base(path) == MetadataFile:
		dir = filepath.Dir(path)
	default:
		s := &split{name: filepath.Base(path), path: path}
		b.splits = []*split{s}
		if err := b.openSplit(s, ""); err != nil {
			b.Close()
			return nil, fmt.Errorf("rosbag2 bag %s: %w", path, err)
		}
		b.db3Compression(s)
		if err := b.finish(); err != nil {
			b.Close()
			return nil, err
		}
		return b, nil
	}
	m, err := metadata.Read(dir)
	switch {
	case err == nil:
		b.meta = m
		b.mode, _ = m.Compression() // ParseMetadata checked it
		if err := b.openListed(dir); err != nil {
			b.Close()
			return nil, err
		}
	case errors.Is(err, os.ErrNotExist):
		if err := b.openFound(dir); err != nil {
			b.Close()
			return nil, err
		}
	default:
		return nil, fmt.Errorf("rosbag2 bag: %w", err)
	}
	if err := b.finish(); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// openListed opens the files metadata.yaml lists, in its order.
func (b *Bag) openListed(dir string) error {
	m := b.meta
	if m.StorageIdentifier != StorageMCAP && m.StorageIdentifier != StorageSQLite3 {
		return fmt.Errorf("rosbag2 bag %s: storage_identifier %q is not one this reader has (mcap, sqlite3)", dir, m.StorageIdentifier)
	}
	if len(m.RelativeFilePaths) == 0 {
		return fmt.Errorf("rosbag2 bag %s: %s lists no files (relative_file_paths)", dir, MetadataFile)
	}
	usable := 0
	for _, name := range m.RelativeFilePaths {
		s := &split{name: name, path: filepath.Join(dir, name)}
		if _, err := os.Stat(s.path); errors.Is(err, os.ErrNotExist) {
			// Early rosbag2 listed paths under the bag directory's own
			// name; the file beside metadata.yaml is the one meant.
			if p := filepath.Join(dir, filepath.Base(name)); p != s.path {
				if _, err := os.Stat(p); err == nil {
					s.path = p
				}
			}
		}
		b.splits = append(b.splits, s)
		err := b.openSplit(s, m.StorageIdentifier)
		var se *storageError
		switch {
		case errors.As(err, &se):
			return err
		case errors.Is(err, os.ErrNotExist):
			s.problem = fmt.Sprintf("split file %s is missing", name)
		case err != nil:
			s.problem = fmt.Sprintf("split file %s cannot be read: %v", name, err)
		default:
			usable++
		}
	}
	if usable == 0 {
		var p []string
		for _, s := range b.splits {
			p = append(p, s.problem)
		}
		return fmt.Errorf("rosbag2 bag %s: no file of the bag can be read: %s", dir, strings.Join(p, "; "))
	}
	return nil
}

// openFound opens the storage files of a directory without metadata.yaml (a
// recording that ended before writing it), ordered by split index.
func (b *Bag) openFound(dir string) error {
	names, err := StorageFiles(dir)
	if err != nil {
		return fmt.Errorf("rosbag2 bag %s: %w", dir, err)
	}
	if len(names) == 0 {
		return fmt.Errorf("rosbag2 bag %s: no %s and no .mcap or .db3 file", dir, MetadataFile)
	}
	b.warnings = append(b.warnings, fmt.Sprintf("%s has no %s: reading its %d storage files in split order", dir, MetadataFile, len(names)))
	for _, name := range names {
		s := &split{name: name, path: filepath.Join(dir, name)}
		b.splits = append(b.splits, s)
		if err := b.openSplit(s, ""); err != nil {
			return fmt.Errorf("rosbag2 bag %s: %s: %w", dir, name, err)
		}
		b.db3Compression(s)
	}
	return nil
}

// db3Compression takes the compression mode of a bag without metadata.yaml
// from a .db3 file's own metadata table (Iron and later keep one).
func (b *Bag) db3Compression(s *split) {
	if d, ok := s.f.(*db3); ok && d.meta != "" && b.mode == CompressionNone {
		if m, err := metadata.Parse([]byte(d.meta)); err == nil {
			b.mode, _ = m.Compression()
		}
	}
}

// StorageFiles lists the .mcap and .db3 files of dir (zstd-compressed ones
// too) in split order: by the number after the last '_' of the name, as
// rosbag2 names splits (bag_0.mcap, bag_1.mcap, …, bag_10.mcap), then by
// name.
func StorageFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if e.Type().IsRegular() && storageOf(e.Name()) != "" {
			names = append(names, e.Name())
		}
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := splitIndex(names[i]), splitIndex(names[j])
		if a != b {
			return a < b
		}
		return names[i] < names[j]
	})
	return names, nil
}

// IsBagDir says whether dir looks like a rosbag2 bag: it has a
// metadata.yaml or a storage file.
func IsBagDir(dir string) bool {
	if st, err := os.Stat(filepath.Join(dir, MetadataFile)); err == nil && st.Mode().IsRegular() {
		return true
	}
	names, err := StorageFiles(dir)
	return err == nil && len(names) > 0
}

func splitIndex(name string) int {
	base := strings.TrimSuffix(name, filepath.Ext(name))
	if strings.HasSuffix(name, ".zstd") {
		base = strings.TrimSuffix(base, filepath.Ext(base))
	}
	i := strings.LastIndexByte(base, '_')
	if i < 0 {
		return -1
	}
	n, err := strconv.Atoi(base[i+1:])
	if err != nil {
		return -1
	}
	return n
}

// storageOf is the storage a file name says, "" for neither.
func storageOf(name string) string {
	n := strings.ToLower(strings.TrimSuffix(name, ".zstd"))
	switch {
	case strings.HasSuffix(n, ".mcap"):
		return StorageMCAP
	case strings.HasSuffix(n, ".db3"):
		return StorageSQLite3
	}
	return ""
}

// storageError is a file whose format is not the one metadata.yaml says: the
// bag's metadata is wrong, which no reading around can fix.
type storageError struct{ err error }

func (e *storageError) Error() string { return e.err.Error() }
func (e *storageError) Unwrap() error { return e.err }

var (
	magicMCAP   = []byte("\x89MCAP0\r\n")
	magicSQLite = []byte("SQLite format 3\x00")
	magicZstd   = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// openSplit opens one storage file: decompressed first when the bag
// compresses files, its format found from its first bytes and checked
// against want (the metadata's storage identifier, "" for none).
func (b *Bag) openSplit(s *split, want string) error {
	head, err := readHead(s.path)
	if err != nil {
		return err
	}
	path := s.path
	if bytes.HasPrefix(head, magicZstd) {
		if b.meta != nil && b.mode != CompressionFile {
			return &storageError{fmt.Errorf("rosbag2 bag %s: %s is zstd-compressed, but %s says compression_mode %q",
				b.path, s.name, MetadataFile, b.meta.CompressionMode)}
		}
		if s.temp, err = decompressFile(s.path); err != nil {
			return err
		}
		path = s.temp
		if head, err = readHead(path); err != nil {
			return err
		}
	} else if b.mode == CompressionFile {
		return &storageError{fmt.Errorf("rosbag2 bag %s: %s says compression_mode file, but %s is not zstd-compressed", b.path, MetadataFile, s.name)}
	}
	switch {
	case bytes.HasPrefix(head, magicMCAP):
		s.storage = StorageMCAP
	case bytes.HasPrefix(head, magicSQLite):
		s.storage = StorageSQLite3
	default:
		// Neither format's magic: the reader the name or the metadata
		// says gives its own error.
		if s.storage = storageOf(s.name); s.storage == "" {
			s.storage = want
		}
		if s.storage == "" {
			return fmt.Errorf("%s is neither an MCAP nor an SQLite file", s.name)
		}
		want = ""
	}
	if want != "" && want != s.storage {
		return &storageError{fmt.Errorf("rosbag2 bag %s: %s says storage_identifier %q, but %s is %s",
			b.path, MetadataFile, want, s.name, map[string]string{StorageMCAP: "an MCAP file", StorageSQLite3: "an SQLite (sqlite3) file"}[s.storage])}
	}
	switch s.storage {
	case StorageMCAP:
		r, err := mcapbag.Open(path)
		if err != nil {
			return err
		}
		s.f = mcapFile{r}
	case StorageSQLite3:
		d, err := openDB3(path)
		if err != nil {
			return err
		}
		s.f = d
	}
	return nil
}

func readHead(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	head := make([]byte, 16)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return head[:n], nil
}

// finish merges the files' topics into the bag's channels and compares them
// with the metadata.
func (b *Bag) finish() error {
	var order []string
	for _, s := range b.splits {
		if s.f == nil {
			continue
		}
		for _, fc := range s.f.channels() {
			c := b.byTopic[fc.Topic]
			if c == nil {
				c = &mcapbag.Channel{Topic: fc.Topic, Type: fc.Type, SchemaEncoding: mcapbag.SchemaEncoding,
					MessageEncoding: fc.Encoding, QoS: fc.QoS}
				b.byTopic[fc.Topic] = c
				order = append(order, fc.Topic)
			} else if c.Type != fc.Type {
				return fmt.Errorf("rosbag2 bag %s: topic %s carries %s in one file and %s in %s", b.path, fc.Topic, c.Type, fc.Type, s.name)
			}
			c.Count += fc.Count
		}
	}
	if m := b.meta; m != nil {
		for _, t := range m.Topics {
			c := b.byTopic[t.Topic.Name]
			if c == nil {
				if t.MessageCount > 0 {
					b.short[t.Topic.Name] = fmt.Sprintf("%s lists %d messages on %s, which no readable file of the bag has", MetadataFile, t.MessageCount, t.Topic.Name)
				}
				// The topic is still offered, so that choosing it names the loss.
				c = &mcapbag.Channel{Topic: t.Topic.Name, Type: t.Topic.Type, SchemaEncoding: mcapbag.SchemaEncoding,
					MessageEncoding: t.Topic.SerializationFormat, QoS: string(t.Topic.OfferedQoSProfiles)}
				b.byTopic[t.Topic.Name] = c
				order = append(order, t.Topic.Name)
				continue
			}
			if c.Type != t.Topic.Type {
				return fmt.Errorf("rosbag2 bag %s: %s says topic %s carries %s, its files say %s", b.path, MetadataFile, t.Topic.Name, t.Topic.Type, c.Type)
			}
			switch {
			case c.Count < t.MessageCount:
				b.short[t.Topic.Name] = fmt.Sprintf("%s lists %d messages on %s, the readable files hold %d", MetadataFile, t.MessageCount, t.Topic.Name, c.Count)
			case c.Count > t.MessageCount:
				b.warnings = append(b.warnings, fmt.Sprintf("%s lists %d messages on %s, the files hold %d (all are read)", MetadataFile, t.MessageCount, t.Topic.Name, c.Count))
			}
		}
		for _, name := range order {
			if m.Topic(name) == nil {
				b.warnings = append(b.warnings, fmt.Sprintf("%s does not list topic %s, which the files hold (it is read)", MetadataFile, name))
			}
		}
	}
	slices.Sort(order)
	for i, name := range order {
		c := b.byTopic[name]
		c.ID = uint16(i + 1)
		b.channels = append(b.channels, c)
	}
	if b.mode == CompressionMessage {
		b.zstd = newZstdDecoder()
	}
	return nil
}

// Path is the path the bag was opened from.
func (b *Bag) Path() string { return b.path }

// Metadata is the bag's metadata.yaml, or nil when it has none.
func (b *Bag) Metadata() *Metadata { return b.meta }

// Storage is the bag's storage identifier (that of its first readable file).
func (b *Bag) Storage() string {
	for _, s := range b.splits {
		if s.storage != "" {
			return s.storage
		}
	}
	return ""
}

// CompressionMode is the bag's compression mode (CompressionNone, File or
// Message).
func (b *Bag) CompressionMode() string { return b.mode }

// Files lists the bag's split files in reading order, as the bag names them.
func (b *Bag) Files() []string {
	var names []string
	for _, s := range b.splits {
		names = append(names, s.name)
	}
	return names
}

// Warnings are disagreements between metadata.yaml and the files that lose
// nothing (more messages or topics than it lists).
func (b *Bag) Warnings() []string { return b.warnings }

// Channels lists the bag's topics by name; Count is what the readable files
// hold.
func (b *Bag) Channels() []*mcapbag.Channel { return b.channels }

// Messages yields the messages of the given topics (all when none are
// given), file after file in the bag's order and in log-time order within a
// file. When files are missing or unreadable, or the topics hold fewer
// messages than the metadata counts, a *PartialError ends the sequence after
// every readable message.
func (b *Bag) Messages(topics ...string) iter.Seq2[*mcapbag.Message, error] {
	return func(yield func(*mcapbag.Message, error) bool) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var problems []string
		for _, s := range b.splits {
			if s.f == nil {
				problems = append(problems, s.problem)
				continue
			}
			n, bad := 0, 0
			var firstBad error
			for fm, err := range s.f.messages(ctx, topics) {
				if err != nil {
					problems = append(problems, fmt.Sprintf("split file %s failed after %d messages: %v", s.name, n, err))
					break
				}
				c := b.byTopic[fm.Topic]
				data := fm.Data
				if b.zstd != nil {
					if data, err = b.zstd.decode(fm.Data); err != nil {
						if bad++; firstBad == nil {
							firstBad = fmt.Errorf("message %d on %s: %w", fm.Sequence, fm.Topic, err)
						}
						continue
					}
				}
				n++
				m := &mcapbag.Message{Channel: c, Topic: c.Topic, Type: c.Type, Sequence: fm.Sequence,
					LogTime: fm.LogTime, PublishTime: fm.PublishTime, Data: data}
				if !yield(m, nil) {
					return
				}
			}
			if bad > 0 {
				problems = append(problems, fmt.Sprintf("split file %s: %d messages did not decompress (the first: %v)", s.name, bad, firstBad))
			}
		}
		for _, c := range b.channels {
			if len(topics) > 0 && !slices.Contains(topics, c.Topic) {
				continue
			}
			if p := b.short[c.Topic]; p != "" {
				problems = append(problems, p)
			}
		}
		if len(problems) > 0 {
			yield(nil, &PartialError{Path: b.path, Problems: problems})
		}
	}
}

// Close closes the files and removes decompressed copies.
func (b *Bag) Close() error {
	var errs []error
	for _, s := range b.splits {
		if s.f != nil {
			errs = append(errs, s.f.close())
			s.f = nil
		}
		if s.temp != "" {
			errs = append(errs, os.Remove(s.temp))
			s.temp = ""
		}
	}
	if b.zstd != nil {
		b.zstd.close()
		b.zstd = nil
	}
	return errors.Join(errs...)
}

// mcapFile is an MCAP split file.
type mcapFile struct{ r *mcapbag.Reader }

func (f mcapFile) channels() []fileChannel {
	var out []fileChannel
	for _, c := range f.r.Channels() {
		out = append(out, fileChannel{Topic: c.Topic, Type: c.Type, Encoding: c.MessageEncoding, QoS: c.QoS, Count: c.Count})
	}
	return out
}

func (f mcapFile) messages(_ context.Context, topics []string) iter.Seq2[fileMessage, error] {
	return func(yield func(fileMessage, error) bool) {
		if len(topics) > 0 {
			// mcapbag reads every topic when given none: ask only for
			// those this file has.
			var have []string
			for _, c := range f.r.Channels() {
				if slices.Contains(topics, c.Topic) {
					have = append(have, c.Topic)
				}
			}
			if len(have) == 0 {
				return
			}
			topics = have
		}
		for m, err := range f.r.Messages(topics...) {
			if err != nil {
				yield(fileMessage{}, err)
				return
			}
			if !yield(fileMessage{Topic: m.Topic, Sequence: m.Sequence, LogTime: m.LogTime, PublishTime: m.PublishTime, Data: m.Data}, nil) {
				return
			}
		}
	}
}

func (f mcapFile) close() error { return f.r.Close() }
