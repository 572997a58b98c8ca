package bagplay

import (
	"context"
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
	"github.com/klauspost/compress/zstd"

	"github.com/lingbotmap/lingbotmap/msgs/cdr"
	"github.com/lingbotmap/lingbotmap/msgs/rosbag2"
	"github.com/lingbotmap/lingbotmap/node"
)

// writeDB3Dir writes a rosbag2 bag directory of sqlite3 splits with message
// compression (Humble's default storage, as `ros2 bag record -s sqlite3
// --compression-mode message` writes it): split k holds images 3k..3k+2 on
// /camera/image_raw, 10 ms apart, with a best-effort recorded QoS.
func writeDB3Dir(t *testing.T, splits int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "rec")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	img, _ := cdr.TypeOf(&sensor_msgs.Image{})
	enc, _ := zstd.NewWriter(nil)
	defer enc.Close()
	qos := "- history: keep_last\n  depth: 5\n  reliability: best_effort\n  durability: volatile\n"
	var files []string
	for k := range splits {
		name := fmt.Sprintf("rec_%d.db3", k)
		files = append(files, "    - "+name)
		db, err := sql.Open("sqlite", filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{
			`CREATE TABLE topics(id INTEGER PRIMARY KEY,name TEXT NOT NULL,type TEXT NOT NULL,serialization_format TEXT NOT NULL,offered_qos_profiles TEXT NOT NULL)`,
			`CREATE TABLE messages(id INTEGER PRIMARY KEY,topic_id INTEGER NOT NULL,timestamp INTEGER NOT NULL, data BLOB NOT NULL)`,
		} {
			if _, err := db.Exec(s); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := db.Exec(`INSERT INTO topics VALUES (1, '/camera/image_raw', ?, 'cdr', ?)`, img.Name, qos); err != nil {
			t.Fatal(err)
		}
		for i := 3 * k; i < 3*k+3; i++ {
			data, err := cdr.Marshal(&sensor_msgs.Image{Header: std_msgs.Header{Stamp: stampOf(10 * i), FrameId: "cam"},
				Width: 1, Height: 1, Encoding: "mono8", Step: 1, Data: []byte{uint8(i)}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(`INSERT INTO messages(topic_id, timestamp, data) VALUES (1, ?, ?)`, stampOf(10*i).UnixNano(), enc.EncodeAll(data, nil)); err != nil {
				t.Fatal(err)
			}
		}
		db.Close()
	}
	meta := fmt.Sprintf(`rosbag2_bagfile_information:
  version: 5
  storage_identifier: sqlite3
  compression_format: zstd
  compression_mode: MESSAGE
  relative_file_paths:
%s
  topics_with_message_count:
    - topic_metadata:
        name: /camera/image_raw
        type: sensor_msgs/msg/Image
        serialization_format: cdr
        offered_qos_profiles: %q
      message_count: %d
`, strings.Join(files, "\n"), qos, 3*splits)
	if err := os.WriteFile(filepath.Join(dir, "metadata.yaml"), []byte(meta), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A bag directory plays its splits in order, decompressing each message,
// with the recorded best-effort QoS; a missing split plays the others and
// ends with the *rosbag2.PartialError that names it.
func TestPlayBagDirectory(t *testing.T) {
	dir := writeDB3Dir(t, 3)
	tr := &fakeTransport{}
	o := DefaultOptions()
	o.Delay = 0
	res, err := Play(context.Background(), dir, tr, o)
	if err != nil || res.Published != 9 || res.Skipped != 0 {
		t.Fatalf("result %+v, %v", res, err)
	}
	if tr.specs[0].Role != node.RoleSensor {
		t.Errorf("role %v for a best-effort recording", tr.specs[0].Role)
	}
	for i, m := range tr.msgs {
		if im := m.(*sensor_msgs.Image); im.Data[0] != uint8(i) || !im.Header.Stamp.Equal(stampOf(10*i)) {
			t.Fatalf("message %d: %+v", i, im.Header)
		}
	}
	if got := tr.times[8].Sub(tr.times[0]); got < 79*time.Millisecond {
		t.Errorf("9 messages 10 ms apart took %v", got)
	}

	if err := os.Remove(filepath.Join(dir, "rec_1.db3")); err != nil {
		t.Fatal(err)
	}
	tr = &fakeTransport{}
	res, err = Play(context.Background(), dir, tr, o)
	var pe *rosbag2.PartialError
	if !errors.As(err, &pe) || res.Published != 6 || !strings.Contains(err.Error(), "split file rec_1.db3 is missing") {
		t.Fatalf("result %+v, %v", res, err)
	}
}
