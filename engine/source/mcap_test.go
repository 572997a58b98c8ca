package source

import (
	"context"
	"errors"
	"image"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"
	"github.com/foxglove/mcap/go/mcap"

	"github.com/lingbotmap/lingbotmap/msgs"
	"github.com/lingbotmap/lingbotmap/msgs/cdr"
	"github.com/lingbotmap/lingbotmap/msgs/mcapbag"
)

// writeTestMCAP stores the frames raw on /cam/image_raw and as PNG on
// /cam/image/compressed, a pose topic beside them, and after frame 1 a raw
// message whose CDR is cut short (written with the mcap library directly,
// since our writer only writes whole messages).
func writeTestMCAP(t *testing.T, frames []*image.RGBA) (string, []time.Time) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cam.mcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := mcap.NewWriter(f, &mcap.WriterOptions{Chunked: true, ChunkSize: 1 << 20, Compression: mcap.CompressionLZ4})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteHeader(&mcap.Header{Profile: "ros2"}); err != nil {
		t.Fatal(err)
	}
	var seq uint32
	ids := map[string]uint16{}
	put := func(topic string, at time.Time, msg any, cut bool) {
		ty, err := cdr.TypeOf(msg)
		if err != nil {
			t.Fatal(err)
		}
		id, ok := ids[topic]
		if !ok {
			id = uint16(len(ids) + 1)
			ids[topic] = id
			if err := w.WriteSchema(&mcap.Schema{ID: id, Name: ty.Name, Encoding: "ros2msg", Data: []byte(ty.Schema)}); err != nil {
				t.Fatal(err)
			}
			if err := w.WriteChannel(&mcap.Channel{ID: id, SchemaID: id, Topic: topic, MessageEncoding: "cdr"}); err != nil {
				t.Fatal(err)
			}
		}
		data, err := cdr.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		if cut {
			data = data[:len(data)/2]
		}
		seq++
		if err := w.WriteMessage(&mcap.Message{ChannelID: id, Sequence: seq, LogTime: uint64(at.UnixNano()), PublishTime: uint64(at.UnixNano()), Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	var stamps []time.Time
	for i, m := range testImages(t, frames) {
		stamps = append(stamps, m.stamp)
		put("/cam/image_raw", m.rec, m.raw, false)
		put("/cam/image/compressed", m.rec, m.png, false)
		put("/pose", m.rec, &geometry_msgs.PoseStamped{Header: std_msgs.Header{Stamp: m.stamp}}, false)
		if i == 1 {
			put("/cam/image_raw", m.rec.Add(time.Millisecond), m.raw, true)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path, stamps
}

func TestMCAPSource(t *testing.T) {
	frames := realFrames(t, 3)
	path, stamps := writeTestMCAP(t, frames)
	checkTestBag(t, path, "MCAP", frames, stamps, func(err error) bool {
		var de *msgs.DecodeError
		return errors.As(err, &de) && de.Kind == msgs.KindCDR
	})

	// FirstK and Stride count messages of the topic, the corrupt one included.
	opt := DefaultOptions()
	opt.Topic, opt.Stride = "/cam/image/compressed", 2
	src, err := OpenMCAP(path, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for _, want := range []int{0, 2} {
		f, err := src.Next(context.Background())
		if err != nil || f.Seq != uint64(want) || !f.Stamp.Equal(stamps[want]) {
			t.Fatalf("stride 2: frame %+v, %v; want input %d", f.Seq, err, want)
		}
	}
}

func TestMCAPSourceErrors(t *testing.T) {
	path, _ := writeTestMCAP(t, realFrames(t, 1))
	checkTopicErrors(t, OpenMCAP, path, map[string]string{
		"":         "several image topics (/cam/image/compressed, /cam/image_raw): choose one with --topic",
		"/missing": `no topic "/missing"`,
		"/pose":    "carries geometry_msgs/msg/PoseStamped",
	})
	for _, junk := range [][]byte{nil, []byte("\x89MCAP0\r\n"), []byte("not an mcap file at all")} {
		p := filepath.Join(t.TempDir(), "junk.mcap")
		if err := os.WriteFile(p, junk, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(context.Background(), p, DefaultOptions()); err == nil {
			t.Errorf("junk MCAP %q accepted", junk)
		}
	}
	// A bag with only a pose topic has no image topic to pick.
	p := filepath.Join(t.TempDir(), "poses.mcap")
	w, err := mcapbag.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write("/pose", time.Unix(1, 0), &geometry_msgs.PoseStamped{}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenMCAP(p, DefaultOptions()); err == nil || !strings.Contains(err.Error(), "no sensor_msgs/msg/Image") {
		t.Errorf("pose-only bag: %v", err)
	}
}
