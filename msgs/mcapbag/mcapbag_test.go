package mcapbag

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"
	"github.com/foxglove/mcap/go/mcap"

	"github.com/lingbotmap/lingbotmap/msgs"
)

const sensorQoS = `- history: 1
  depth: 5
  reliability: 2
  durability: 2
`

func at(ms int) time.Time { return time.Unix(1700000000, int64(ms)*1_000_000) }

func image(ms int) *sensor_msgs.Image {
	return &sensor_msgs.Image{Header: std_msgs.Header{Stamp: at(ms), FrameId: "cam"}, Height: 1, Width: 2,
		Encoding: "mono8", Step: 2, Data: []byte{byte(ms), 7}}
}

func pose(ms int) *geometry_msgs.PoseStamped {
	return &geometry_msgs.PoseStamped{Header: std_msgs.Header{Stamp: at(ms), FrameId: "map"},
		Pose: geometry_msgs.Pose{Position: geometry_msgs.Point{X: float64(ms)}, Orientation: geometry_msgs.Quaternion{W: 1}}}
}

// Two topics written out of time order come back per topic and in log-time
// order, with their types, QoS and counts.
func TestWriteRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.mcap")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.SetQoS("/cam", sensorQoS); err != nil {
		t.Fatal(err)
	}
	for _, ms := range []int{0, 100, 50, 200} {
		if err := w.Write("/cam", at(ms), image(ms)); err != nil {
			t.Fatal(err)
		}
		if err := w.Write("/pose", at(ms+1), pose(ms)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Write("/cam", at(300), pose(1)); err == nil || !strings.Contains(err.Error(), "carries sensor_msgs/msg/Image") {
		t.Errorf("a second type on /cam: %v", err)
	}
	if err := w.SetQoS("/cam", ReliableQoS); err == nil {
		t.Error("QoS changed after the first message")
	}
	if err := w.Write("/x", at(0), &std_msgs.String{}); err == nil {
		t.Error("a type without a ROS 2 description was written")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Write("/cam", at(0), image(0)); err == nil {
		t.Error("write after Close accepted")
	}

	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Profile() != "ros2" || !r.Indexed() {
		t.Fatalf("profile %q, indexed %v", r.Profile(), r.Indexed())
	}
	chans := r.Channels()
	if len(chans) != 2 {
		t.Fatalf("%d channels", len(chans))
	}
	want := []Channel{
		{ID: chans[0].ID, Topic: "/cam", Type: "sensor_msgs/msg/Image", SchemaEncoding: "ros2msg", MessageEncoding: "cdr", QoS: sensorQoS, Count: 4},
		{ID: chans[1].ID, Topic: "/pose", Type: "geometry_msgs/msg/PoseStamped", SchemaEncoding: "ros2msg", MessageEncoding: "cdr", QoS: ReliableQoS, Count: 4},
	}
	for i := range want {
		if *chans[i] != want[i] {
			t.Errorf("channel %d: %+v, want %+v", i, *chans[i], want[i])
		}
	}
	var got []int
	for m, err := range r.Messages("/cam") {
		if err != nil {
			t.Fatal(err)
		}
		var im sensor_msgs.Image
		if err := m.Decode(&im); err != nil {
			t.Fatal(err)
		}
		ms := int(im.Data[0])
		if !reflect.DeepEqual(&im, image(ms)) || !m.LogTime.Equal(at(ms)) || m.Topic != "/cam" || m.Type != "sensor_msgs/msg/Image" {
			t.Fatalf("message %+v decoded to %+v", m, im)
		}
		got = append(got, ms)
	}
	if !reflect.DeepEqual(got, []int{0, 50, 100, 200}) {
		t.Errorf("/cam in log-time order: %v", got)
	}
	n := 0
	for m, err := range r.Messages() {
		if err != nil {
			t.Fatal(err)
		}
		if n++; n == 4 { // /cam 0, /pose 1, /cam 50, /pose 51
			var p geometry_msgs.PoseStamped
			if err := m.Decode(&p); err != nil || m.Topic != "/pose" || p.Pose.Position.X != 50 {
				t.Fatalf("fourth message (%s): %v %+v", m.Topic, err, p)
			}
			break // an early stop must not leave the reader stuck
		}
	}
	if n != 4 {
		t.Fatalf("read %d messages", n)
	}
	count := 0
	for _, err := range r.Messages() {
		if err != nil {
			t.Fatal(err)
		}
		count++
	}
	if count != 8 {
		t.Fatalf("all topics: %d messages, want 8", count)
	}
}

// A file without a summary (a recording cut short) is scanned for its
// channels and read in file order; a message that is not CDR is refused.
func TestReadUnindexed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raw.mcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := mcap.NewWriter(f, &mcap.WriterOptions{Chunked: false, SkipStatistics: true, SkipChunkIndex: true,
		SkipRepeatedSchemas: true, SkipRepeatedChannelInfos: true, SkipSummaryOffsets: true, SkipMessageIndexing: true})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.WriteHeader(&mcap.Header{Profile: "ros2"}))
	must(w.WriteSchema(&mcap.Schema{ID: 1, Name: "std_msgs/msg/String", Encoding: "ros2msg", Data: []byte("string data\n")}))
	must(w.WriteChannel(&mcap.Channel{ID: 3, SchemaID: 1, Topic: "/json", MessageEncoding: "json"}))
	must(w.WriteMessage(&mcap.Message{ChannelID: 3, LogTime: 5, Data: []byte(`{"data":"x"}`)}))
	must(w.WriteMessage(&mcap.Message{ChannelID: 3, LogTime: 2, Data: []byte(`{"data":"y"}`)}))
	must(w.Close())
	must(f.Close())

	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Indexed() || len(r.Channels()) != 1 || r.Channels()[0].Count != 2 || r.Channels()[0].Type != "std_msgs/msg/String" {
		t.Fatalf("indexed %v, channels %+v", r.Indexed(), r.Channels())
	}
	var times []int64
	for m, err := range r.Messages("/json") {
		if err != nil {
			t.Fatal(err)
		}
		times = append(times, m.LogTime.UnixNano())
		var im sensor_msgs.Image
		if err := m.Decode(&im); err == nil || !strings.Contains(err.Error(), `"json" is not "cdr"`) {
			t.Fatalf("decoding a JSON message as CDR: %v", err)
		}
	}
	if !reflect.DeepEqual(times, []int64{5, 2}) {
		t.Errorf("file order: %v", times)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing.mcap")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	for _, junk := range []string{"", "\x89MCAP0\r\n", "PK\x03\x04 a zip file"} {
		p := filepath.Join(dir, "junk.mcap")
		if err := os.WriteFile(p, []byte(junk), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(p); err == nil {
			t.Errorf("junk %q opened", junk)
		}
	}
	// A corrupt message inside a valid file is the caller's to count.
	path := filepath.Join(dir, "b.mcap")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write("/cam", at(0), image(0)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for m, err := range r.Messages() {
		if err != nil {
			t.Fatal(err)
		}
		m.Data = m.Data[:9]
		var im sensor_msgs.Image
		var de *msgs.DecodeError
		if err := m.Decode(&im); !errors.As(err, &de) || de.Kind != msgs.KindCDR {
			t.Fatalf("cut message: %v", err)
		}
	}
}
