package rosbag2

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"
	"github.com/foxglove/mcap/go/mcap"
	"github.com/klauspost/compress/zstd"

	"github.com/lingbotmap/lingbotmap/msgs/cdr"
	"github.com/lingbotmap/lingbotmap/msgs/mcapbag"
	"github.com/lingbotmap/lingbotmap/msgs/rosbag2/metadata"
)

const camTopic = "/camera/image_raw"

// image i is a 2×1 mono8 image whose first byte is i, stamped at i×100 ms.
func image(i int) *sensor_msgs.Image {
	return &sensor_msgs.Image{Header: std_msgs.Header{Stamp: stamp(i), FrameId: "cam"},
		Height: 1, Width: 2, Encoding: "mono8", Step: 2, Data: []byte{byte(i), 7}}
}

func stamp(i int) time.Time { return time.Unix(1700000000, int64(i)*100e6).UTC() }

// writeMCAP writes images first..last-1 on camTopic.
func writeMCAP(t *testing.T, path string, first, last int) {
	t.Helper()
	w, err := mcapbag.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := first; i < last; i++ {
		if err := w.Write(camTopic, stamp(i), image(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// writeDB3 writes images first..last-1 on camTopic into a .db3 with the
// tables rosbag2_storage_sqlite3 (Jazzy) creates; compress zstd-compresses
// each message, as message compression does.
func writeDB3(t *testing.T, path string, first, last int, compress bool) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	img, _ := cdr.TypeOf(image(0))
	stmts := []string{
		`CREATE TABLE schema(schema_version INTEGER PRIMARY KEY,ros_distro TEXT NOT NULL)`,
		`INSERT INTO schema VALUES (4, 'jazzy')`,
		`CREATE TABLE metadata(id INTEGER PRIMARY KEY,metadata_version INTEGER NOT NULL,metadata TEXT NOT NULL)`,
		`CREATE TABLE topics(id INTEGER PRIMARY KEY,name TEXT NOT NULL,type TEXT NOT NULL,serialization_format TEXT NOT NULL,offered_qos_profiles TEXT NOT NULL,type_description_hash TEXT NOT NULL)`,
		`CREATE TABLE messages(id INTEGER PRIMARY KEY,topic_id INTEGER NOT NULL,timestamp INTEGER NOT NULL, data BLOB NOT NULL)`,
		`CREATE INDEX timestamp_idx ON messages (timestamp ASC)`,
		// a second topic, to show topic selection and ids other than 1
		`INSERT INTO topics VALUES (3, '/other', 'std_msgs/msg/Header', 'cdr', '', '')`,
		fmt.Sprintf(`INSERT INTO topics VALUES (5, '%s', 'sensor_msgs/msg/Image', 'cdr', '%s', '%s')`, camTopic, mcapbag.ReliableQoS, img.Hash),
	}
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	enc, _ := zstd.NewWriter(nil)
	defer enc.Close()
	// Rows in reverse order: the reader sorts by timestamp.
	for i := last - 1; i >= first; i-- {
		data, err := cdr.Marshal(image(i))
		if err != nil {
			t.Fatal(err)
		}
		if compress {
			data = enc.EncodeAll(data, nil)
		}
		if _, err := db.Exec(`INSERT INTO messages(topic_id, timestamp, data) VALUES (5, ?, ?)`, stamp(i).UnixNano(), data); err != nil {
			t.Fatal(err)
		}
		h, _ := cdr.Marshal(&std_msgs.Header{FrameId: "x"})
		if compress {
			h = enc.EncodeAll(h, nil)
		}
		if _, err := db.Exec(`INSERT INTO messages(topic_id, timestamp, data) VALUES (3, ?, ?)`, stamp(i).UnixNano()+1, h); err != nil {
			t.Fatal(err)
		}
	}
}

func zstdFile(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := zstd.NewWriter(nil)
	defer enc.Close()
	if err := os.WriteFile(path+".zstd", enc.EncodeAll(b, nil), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

// bagDir writes a bag directory of splits (each [first, last) images) in
// storage with compression mode, and its metadata.yaml as rosbag2 writes it;
// edit may change the metadata before it is written.
func bagDir(t *testing.T, storage, mode string, splits [][2]int, edit func(*metadata.Metadata)) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bag")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	img, _ := cdr.TypeOf(image(0))
	m := &metadata.Metadata{Version: 9, StorageIdentifier: storage, ROSDistro: "jazzy"}
	total := 0
	for k, s := range splits {
		name := fmt.Sprintf("bag_%d.%s", k, map[string]string{StorageMCAP: "mcap", StorageSQLite3: "db3"}[storage])
		p := filepath.Join(dir, name)
		if storage == StorageMCAP {
			if mode == CompressionMessage {
				t.Fatal("this helper writes message compression for sqlite3 only")
			}
			writeMCAP(t, p, s[0], s[1])
		} else {
			writeDB3(t, p, s[0], s[1], mode == CompressionMessage)
		}
		if mode == CompressionFile {
			zstdFile(t, p)
			name += ".zstd"
		}
		m.RelativeFilePaths = append(m.RelativeFilePaths, name)
		total += s[1] - s[0]
	}
	m.Topics = []metadata.TopicInformation{{Topic: metadata.TopicMetadata{Name: camTopic, Type: "sensor_msgs/msg/Image",
		SerializationFormat: "cdr", OfferedQoSProfiles: metadata.QoSProfiles(mcapbag.ReliableQoS), TypeDescriptionHash: img.Hash},
		MessageCount: uint64(total)}}
	if storage == StorageSQLite3 {
		m.Topics = append(m.Topics, metadata.TopicInformation{Topic: metadata.TopicMetadata{Name: "/other",
			Type: "std_msgs/msg/Header", SerializationFormat: "cdr"}, MessageCount: uint64(total)})
	}
	m.MessageCount = uint64(total * len(m.Topics))
	if mode != "" {
		m.CompressionFormat, m.CompressionMode = "zstd", strings.ToUpper(mode)
	}
	if edit != nil {
		edit(m)
	}
	b, err := m.MarshalFile()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, MetadataFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// readCam reads camTopic and returns the first byte of each image, and the
// error that ended the messages.
func readCam(t *testing.T, b *Bag) ([]int, error) {
	t.Helper()
	var got []int
	for m, err := range b.Messages(camTopic) {
		if err != nil {
			return got, err
		}
		var im sensor_msgs.Image
		if err := m.Decode(&im); err != nil {
			t.Fatalf("message %d: %v", m.Sequence, err)
		}
		if m.Topic != camTopic || m.Type != "sensor_msgs/msg/Image" || !m.LogTime.Equal(stamp(int(im.Data[0]))) {
			t.Fatalf("message %+v", m)
		}
		got = append(got, int(im.Data[0]))
	}
	return got, nil
}

func seq(first, last int) []int {
	var s []int
	for i := first; i < last; i++ {
		s = append(s, i)
	}
	return s
}

func equal(a, b []int) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// Every storage and compression mode a rosbag2 bag can have, as a
// directory of three splits: all messages, in split then time order.
func TestStoragesAndCompression(t *testing.T) {
	for _, tc := range []struct{ storage, mode string }{
		{StorageMCAP, CompressionNone}, {StorageMCAP, CompressionFile},
		{StorageSQLite3, CompressionNone}, {StorageSQLite3, CompressionFile}, {StorageSQLite3, CompressionMessage},
	} {
		t.Run(tc.storage+"/"+tc.mode, func(t *testing.T) {
			dir := bagDir(t, tc.storage, tc.mode, [][2]int{{0, 3}, {3, 5}, {5, 9}}, nil)
			b, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if b.Storage() != tc.storage || b.CompressionMode() != tc.mode || len(b.Files()) != 3 || len(b.Warnings()) != 0 {
				t.Fatalf("storage %q mode %q files %v warnings %v", b.Storage(), b.CompressionMode(), b.Files(), b.Warnings())
			}
			var cam *mcapbag.Channel
			for _, c := range b.Channels() {
				if c.Topic == camTopic {
					cam = c
				}
			}
			if cam == nil || cam.Count != 9 || cam.Type != "sensor_msgs/msg/Image" || cam.QoS != mcapbag.ReliableQoS && cam.QoS != strings.TrimSuffix(mcapbag.ReliableQoS, "\n") {
				t.Fatalf("channel %+v", cam)
			}
			got, err := readCam(t, b)
			if err != nil || !equal(got, seq(0, 9)) {
				t.Fatalf("got %v, %v", got, err)
			}
			// All topics: the other topic's messages come too.
			n := 0
			for _, err := range b.Messages() {
				if err != nil {
					t.Fatal(err)
				}
				n++
			}
			if want := map[string]int{StorageMCAP: 9, StorageSQLite3: 18}[tc.storage]; n != want {
				t.Fatalf("%d messages of all topics, want %d", n, want)
			}
		})
	}
	t.Run("file compression leaves no copy behind", func(t *testing.T) {
		tmp := t.TempDir()
		t.Setenv("TMPDIR", tmp)
		dir := bagDir(t, StorageMCAP, CompressionFile, [][2]int{{0, 2}}, nil)
		b, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if ents, _ := os.ReadDir(tmp); len(ents) != 1 {
			t.Fatalf("decompressed copies: %v", ents)
		}
		b.Close()
		if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
			t.Fatalf("left behind: %v", ents)
		}
	})
}

// A .db3 alone, a directory without metadata.yaml (a recording cut short),
// metadata.yaml itself, and an .mcap alone.
func TestSingleFilesAndNoMetadata(t *testing.T) {
	dir := bagDir(t, StorageSQLite3, CompressionNone, [][2]int{{0, 2}, {2, 4}}, nil)
	for _, p := range []string{filepath.Join(dir, "bag_1.db3"), filepath.Join(dir, MetadataFile)} {
		b, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := readCam(t, b)
		want := map[bool][]int{true: seq(2, 4), false: seq(0, 4)}[strings.HasSuffix(p, ".db3")]
		if err != nil || !equal(got, want) {
			t.Fatalf("%s: got %v, %v", p, got, err)
		}
		b.Close()
	}
	// Without metadata.yaml: the files in split order (10 after 2).
	bare := t.TempDir()
	for k, s := range map[int][2]int{10: {6, 8}, 2: {2, 6}, 0: {0, 2}} {
		writeMCAP(t, filepath.Join(bare, fmt.Sprintf("rec_%d.mcap", k)), s[0], s[1])
	}
	if !IsBagDir(bare) || IsBagDir(t.TempDir()) {
		t.Fatal("IsBagDir")
	}
	b, err := Open(bare)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if f := b.Files(); !equal([]int{len(f)}, []int{3}) || f[0] != "rec_0.mcap" || f[2] != "rec_10.mcap" {
		t.Fatalf("files %v", f)
	}
	if w := b.Warnings(); len(w) != 1 || !strings.Contains(w[0], "no metadata.yaml") {
		t.Fatalf("warnings %v", w)
	}
	got, err := readCam(t, b)
	if err != nil || !equal(got, seq(0, 8)) {
		t.Fatalf("got %v, %v", got, err)
	}
}

// The metadata.yaml forms of Jazzy (version 9: QoS as a list) and Humble
// (version 5: QoS as a string of YAML), the bare form of an MCAP record, and
// a round trip.
func TestParseMetadata(t *testing.T) {
	humble := `rosbag2_bagfile_information:
  version: 5
  storage_identifier: sqlite3
  duration:
    nanoseconds: 3000000000
  starting_time:
    nanoseconds_since_epoch: 1700000000000000000
  message_count: 30
  topics_with_message_count:
    - topic_metadata:
        name: /camera/image_raw
        type: sensor_msgs/msg/Image
        serialization_format: cdr
        offered_qos_profiles: "- history: 3\n  depth: 0\n  reliability: 2\n  durability: 2\n"
      message_count: 30
  compression_format: zstd
  compression_mode: FILE
  relative_file_paths:
    - rec_0.db3.zstd
  files:
    - path: rec_0.db3
      starting_time:
        nanoseconds_since_epoch: 1700000000000000000
      duration:
        nanoseconds: 3000000000
      message_count: 30
`
	m, err := metadata.Parse([]byte(humble))
	if err != nil {
		t.Fatal(err)
	}
	mode, err := m.Compression()
	if m.Version != 5 || m.StorageIdentifier != "sqlite3" || m.MessageCount != 30 || mode != CompressionFile || err != nil ||
		m.Topics[0].Topic.OfferedQoSProfiles != "- history: 3\n  depth: 0\n  reliability: 2\n  durability: 2\n" ||
		m.RelativeFilePaths[0] != "rec_0.db3.zstd" || m.Duration.Nanoseconds != 3e9 {
		t.Fatalf("%+v", m)
	}
	// Jazzy's: QoS as a list, written back as one, and read again equal.
	m.Version = 9
	m.Topics[0].Topic.OfferedQoSProfiles = metadata.QoSProfiles(mcapbag.ReliableQoS)
	m.Topics[0].Topic.TypeDescriptionHash = "RIHS01_00"
	for _, marshal := range []func() ([]byte, error){m.Marshal, m.MarshalFile} {
		b, err := marshal()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "offered_qos_profiles:\n") || !strings.Contains(string(b), "- history: keep_last") {
			t.Fatalf("QoS not written as a list:\n%s", b)
		}
		back, err := metadata.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		if q := string(back.Topics[0].Topic.OfferedQoSProfiles); q != strings.TrimSuffix(mcapbag.ReliableQoS, "\n") ||
			back.Topics[0].Topic.TypeDescriptionHash != "RIHS01_00" || back.Version != 9 || back.Files[0].MessageCount != 30 {
			t.Fatalf("round trip: %+v\n%q", back, q)
		}
	}
	for name, bad := range map[string]string{
		"not yaml":         "{",
		"not rosbag2":      "foo: 1\n",
		"no storage":       "rosbag2_bagfile_information:\n  version: 9\n",
		"compression lz4":  "rosbag2_bagfile_information:\n  version: 9\n  storage_identifier: mcap\n  compression_format: lz4\n  compression_mode: FILE\n",
		"compression mode": "rosbag2_bagfile_information:\n  version: 9\n  storage_identifier: mcap\n  compression_format: zstd\n  compression_mode: CHUNK\n",
		"escaping path":    "rosbag2_bagfile_information:\n  version: 9\n  storage_identifier: mcap\n  relative_file_paths: [../x.mcap]\n",
		"topic twice":      "rosbag2_bagfile_information:\n  version: 9\n  storage_identifier: mcap\n  topics_with_message_count:\n    - topic_metadata: {name: /a, type: t}\n    - topic_metadata: {name: /a, type: t}\n",
	} {
		if _, err := metadata.Parse([]byte(bad)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

// Bad bags: each gets a clear error, or, where messages could be read, all
// of them and then a *PartialError naming what is missing.
func TestBadBags(t *testing.T) {
	splits := [][2]int{{0, 3}, {3, 6}, {6, 9}}
	partial := func(t *testing.T, dir string, want []int, says ...string) {
		t.Helper()
		b, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		got, err := readCam(t, b)
		var pe *PartialError
		if !errors.As(err, &pe) || !equal(got, want) {
			t.Fatalf("got %v, %v; want %v and a PartialError", got, err, want)
		}
		for _, s := range says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not say %q", err, s)
			}
		}
	}
	fails := func(t *testing.T, dir string, says ...string) {
		t.Helper()
		b, err := Open(dir)
		if err == nil {
			b.Close()
			t.Fatal("opened")
		}
		for _, s := range says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not say %q", err, s)
			}
		}
	}
	for _, storage := range []string{StorageMCAP, StorageSQLite3} {
		ext := map[string]string{StorageMCAP: "mcap", StorageSQLite3: "db3"}[storage]
		t.Run(storage+"/missing split", func(t *testing.T) {
			dir := bagDir(t, storage, CompressionNone, splits, nil)
			os.Remove(filepath.Join(dir, "bag_1."+ext))
			partial(t, dir, append(seq(0, 3), seq(6, 9)...), "split file bag_1."+ext+" is missing", "lists 9 messages on /camera/image_raw, the readable files hold 6")
		})
		t.Run(storage+"/all splits missing", func(t *testing.T) {
			dir := bagDir(t, storage, CompressionNone, splits, nil)
			for k := range splits {
				os.Remove(filepath.Join(dir, fmt.Sprintf("bag_%d.%s", k, ext)))
			}
			fails(t, dir, "no file of the bag can be read", "bag_2."+ext+" is missing")
		})
		t.Run(storage+"/count above the files", func(t *testing.T) {
			dir := bagDir(t, storage, CompressionNone, splits, func(m *metadata.Metadata) { m.Topics[0].MessageCount = 12 })
			partial(t, dir, seq(0, 9), "lists 12 messages on /camera/image_raw, the readable files hold 9")
		})
		t.Run(storage+"/count below the files", func(t *testing.T) {
			dir := bagDir(t, storage, CompressionNone, splits, func(m *metadata.Metadata) { m.Topics[0].MessageCount = 5 })
			b, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			got, err := readCam(t, b)
			if err != nil || !equal(got, seq(0, 9)) || len(b.Warnings()) != 1 || !strings.Contains(b.Warnings()[0], "lists 5 messages") {
				t.Fatalf("got %v, %v, warnings %v", got, err, b.Warnings())
			}
		})
		t.Run(storage+"/topic missing from the files", func(t *testing.T) {
			dir := bagDir(t, storage, CompressionNone, splits, func(m *metadata.Metadata) {
				m.Topics = append(m.Topics, metadata.TopicInformation{Topic: metadata.TopicMetadata{Name: "/cam2", Type: "sensor_msgs/msg/Image", SerializationFormat: "cdr"}, MessageCount: 4})
			})
			b, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			var pe *PartialError
			n := 0
			for _, err := range b.Messages("/cam2") {
				if err != nil && !errors.As(err, &pe) {
					t.Fatal(err)
				}
				if err == nil {
					n++
				}
			}
			if pe == nil || n != 0 || !strings.Contains(pe.Error(), "lists 4 messages on /cam2, which no readable file of the bag has") {
				t.Fatalf("%d messages, %v", n, pe)
			}
			// The topic that is there reads whole.
			if got, err := readCam(t, b); err != nil || !equal(got, seq(0, 9)) {
				t.Fatalf("got %v, %v", got, err)
			}
		})
		t.Run(storage+"/topic missing from the metadata", func(t *testing.T) {
			dir := bagDir(t, storage, CompressionNone, splits, func(m *metadata.Metadata) { m.Topics = m.Topics[1:] })
			b, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if got, err := readCam(t, b); err != nil || !equal(got, seq(0, 9)) || !strings.Contains(fmt.Sprint(b.Warnings()), "does not list topic /camera/image_raw") {
				t.Fatalf("got %v, %v, warnings %v", got, err, b.Warnings())
			}
		})
		t.Run(storage+"/wrong storage identifier", func(t *testing.T) {
			other := map[string]string{StorageMCAP: StorageSQLite3, StorageSQLite3: StorageMCAP}[storage]
			dir := bagDir(t, storage, CompressionNone, splits, func(m *metadata.Metadata) { m.StorageIdentifier = other })
			fails(t, dir, fmt.Sprintf("says storage_identifier %q, but bag_0.%s is", other, ext))
			dir = bagDir(t, storage, CompressionNone, splits, func(m *metadata.Metadata) { m.StorageIdentifier = "rosbag_v2" })
			fails(t, dir, `storage_identifier "rosbag_v2" is not one this reader has`)
		})
		t.Run(storage+"/wrong type", func(t *testing.T) {
			dir := bagDir(t, storage, CompressionNone, splits, func(m *metadata.Metadata) { m.Topics[0].Topic.Type = "sensor_msgs/msg/CompressedImage" })
			fails(t, dir, "says topic /camera/image_raw carries sensor_msgs/msg/CompressedImage, its files say sensor_msgs/msg/Image")
		})
		t.Run(storage+"/compression disagrees", func(t *testing.T) {
			dir := bagDir(t, storage, CompressionFile, splits, func(m *metadata.Metadata) { m.CompressionMode, m.CompressionFormat = "", "" })
			fails(t, dir, "bag_0."+ext+".zstd is zstd-compressed, but metadata.yaml says compression_mode \"\"")
			dir = bagDir(t, storage, CompressionNone, splits, func(m *metadata.Metadata) { m.CompressionMode, m.CompressionFormat = "FILE", "zstd" })
			fails(t, dir, "says compression_mode file, but bag_0."+ext+" is not zstd-compressed")
		})
		t.Run(storage+"/split replaced by garbage", func(t *testing.T) {
			dir := bagDir(t, storage, CompressionNone, splits, nil)
			if err := os.WriteFile(filepath.Join(dir, "bag_0."+ext), []byte("not a bag at all, just some text"), 0o644); err != nil {
				t.Fatal(err)
			}
			partial(t, dir, seq(3, 9), "split file bag_0."+ext+" cannot be read")
		})
	}
	t.Run("corrupt db3", func(t *testing.T) {
		dir := bagDir(t, StorageSQLite3, CompressionNone, splits, nil)
		// SQLite's header, then damage: the file claims to be a database
		// and is not one.
		p := filepath.Join(dir, "bag_1.db3")
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i := 100; i < len(b); i++ {
			b[i] ^= 0x5a
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		partial(t, dir, append(seq(0, 3), seq(6, 9)...), "split file bag_1.db3 cannot be read")
		// Alone, it is an error.
		if _, err := Open(p); err == nil || !strings.Contains(err.Error(), "sqlite3 bag") {
			t.Fatalf("corrupt .db3 alone: %v", err)
		}
	})
	t.Run("truncated db3", func(t *testing.T) {
		dir := bagDir(t, StorageSQLite3, CompressionNone, splits, nil)
		p := filepath.Join(dir, "bag_2.db3")
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, st.Size()/2); err != nil {
			t.Fatal(err)
		}
		b, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		got, err := readCam(t, b)
		var pe *PartialError
		if !errors.As(err, &pe) || len(got) < 6 || !equal(got[:6], seq(0, 6)) || !strings.Contains(err.Error(), "bag_2.db3") {
			t.Fatalf("got %v, %v", got, err)
		}
	})
	t.Run("corrupt compressed message", func(t *testing.T) {
		dir := bagDir(t, StorageSQLite3, CompressionMessage, splits, nil)
		db, err := sql.Open("sqlite", filepath.Join(dir, "bag_1.db3"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = db.Exec(`UPDATE messages SET data = x'00010203' WHERE topic_id = 5 AND timestamp = ?`, stamp(4).UnixNano())
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
		partial(t, dir, []int{0, 1, 2, 3, 5, 6, 7, 8}, "split file bag_1.db3: 1 messages did not decompress (the first: message 2 on /camera/image_raw:")
	})
}

// The MCAP we write carries the rosbag2 metadata record (what `ros2 bag
// info` shows for a file alone) and each channel's type hash and QoS.
func TestWrittenMCAPHasRosbag2Metadata(t *testing.T) {
	p := filepath.Join(t.TempDir(), "frames.mcap")
	writeMCAP(t, p, 2, 7)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := mcap.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	info, err := r.Info()
	if err != nil {
		t.Fatal(err)
	}
	img, _ := cdr.TypeOf(image(0))
	for _, c := range info.Channels {
		if c.Metadata["topic_type_hash"] != img.Hash || c.Metadata["offered_qos_profiles"] != mcapbag.ReliableQoS {
			t.Fatalf("channel metadata %v", c.Metadata)
		}
	}
	if len(info.MetadataIndexes) != 1 || info.MetadataIndexes[0].Name != "rosbag2" {
		t.Fatalf("metadata indexes %+v", info.MetadataIndexes)
	}
	rec, err := r.GetMetadata(info.MetadataIndexes[0].Offset)
	if err != nil {
		t.Fatal(err)
	}
	m, err := metadata.Parse([]byte(rec.Metadata["serialized_metadata"]))
	if err != nil {
		t.Fatal(err)
	}
	tp := m.Topic(camTopic)
	if m.Version != 9 || m.StorageIdentifier != "mcap" || m.MessageCount != 5 || m.RelativeFilePaths[0] != "frames.mcap" ||
		m.StartingTime.NanosecondsSinceEpoch != stamp(2).UnixNano() || m.Duration.Nanoseconds != 4*100e6 ||
		tp == nil || tp.MessageCount != 5 || tp.Topic.TypeDescriptionHash != img.Hash || tp.Topic.Type != "sensor_msgs/msg/Image" ||
		string(tp.Topic.OfferedQoSProfiles) != strings.TrimSuffix(mcapbag.ReliableQoS, "\n") {
		t.Fatalf("%+v\n%s", m, rec.Metadata["serialized_metadata"])
	}
}

// A .db3 with message compression, alone or in a directory without
// metadata.yaml, takes its compression from its own metadata table; a
// relative_file_paths entry under the bag directory's name (early rosbag2)
// finds the file beside metadata.yaml.
func TestDB3OwnMetadataAndOldPaths(t *testing.T) {
	dir := bagDir(t, StorageSQLite3, CompressionMessage, [][2]int{{0, 4}}, nil)
	p := filepath.Join(dir, "bag_0.db3")
	db, err := sql.Open("sqlite", p)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec(`INSERT INTO metadata(metadata_version, metadata) VALUES (9, ?)`,
		"version: 9\nstorage_identifier: sqlite3\ncompression_format: zstd\ncompression_mode: MESSAGE\nrelative_file_paths:\n  - bag_0.db3\n")
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	bare := t.TempDir()
	if err := os.Rename(p, filepath.Join(bare, "bag_0.db3")); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(bare, "bag_0.db3"), bare} {
		b, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := readCam(t, b)
		if err != nil || !equal(got, seq(0, 4)) || b.CompressionMode() != CompressionMessage {
			t.Fatalf("%s: got %v, %v, mode %q", path, got, err, b.CompressionMode())
		}
		b.Close()
	}

	dir = bagDir(t, StorageMCAP, CompressionNone, [][2]int{{0, 2}, {2, 3}}, func(m *metadata.Metadata) {
		for i, f := range m.RelativeFilePaths {
			m.RelativeFilePaths[i] = "bag/" + f
		}
	})
	b, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got, err := readCam(t, b); err != nil || !equal(got, seq(0, 3)) {
		t.Fatalf("got %v, %v", got, err)
	}
}
