package source

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
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
	for i, img := range frames {
		stamp := time.Unix(1700000000, 0).Add(time.Duration(i) * 100 * time.Millisecond)
		stamps = append(stamps, stamp)
		rec := stamp.Add(5 * time.Millisecond)
		put("/cam/image_raw", rec, rawImage(img, stamp), false)
		var buf bytes.Buffer
		if err := png.Encode(&buf, img); err != nil {
			t.Fatal(err)
		}
		put("/cam/image/compressed", rec, &sensor_msgs.CompressedImage{Header: std_msgs.Header{Stamp: stamp}, Format: "png", Data: buf.Bytes()}, false)
		put("/pose", rec, &geometry_msgs.PoseStamped{Header: std_msgs.Header{Stamp: stamp}}, false)
		if i == 1 {
			put("/cam/image_raw", rec.Add(time.Millisecond), rawImage(img, stamp), true)
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
	for _, topic := range []string{"/cam/image_raw", "/cam/image/compressed"} {
		opt := DefaultOptions()
		opt.Topic = topic
		src, err := Open(context.Background(), path, opt)
		if err != nil {
			t.Fatal(err)
		}
		wantLen := 3
		if topic == "/cam/image_raw" {
			wantLen = 4 // the summary counts the corrupt message too
		}
		if src.Len() != wantLen || !strings.Contains(src.Describe(), "MCAP") {
			t.Errorf("%s: Len %d, Describe %q", topic, src.Len(), src.Describe())
		}
		for i := range 3 {
			f, err := src.Next(context.Background())
			if err != nil {
				t.Fatalf("%s frame %d: %v", topic, i, err)
			}
			if !f.Stamp.Equal(stamps[i]) || f.Width != 518 || f.Height != 294 {
				t.Fatalf("%s frame %d: stamp %v, %dx%d", topic, i, f.Stamp, f.Width, f.Height)
			}
			if got := f.Image.(*image.RGBA); !bytes.Equal(got.Pix, frames[i].Pix) {
				t.Fatalf("%s frame %d: pixels differ", topic, i)
			}
		}
		if _, err := src.Next(context.Background()); !errors.Is(err, io.EOF) {
			t.Fatalf("%s: after the last frame: %v", topic, err)
		}
		n, first := src.(*MCAP).Skipped()
		var de *msgs.DecodeError
		if topic == "/cam/image_raw" && (n != 1 || !errors.As(first, &de) || de.Kind != msgs.KindCDR) {
			t.Errorf("%s: skipped %d (%v), want the cut-short message as a cdr error", topic, n, first)
		}
		if topic != "/cam/image_raw" && n != 0 {
			t.Errorf("%s: skipped %d (%v)", topic, n, first)
		}
		if err := src.Close(); err != nil {
			t.Fatal(err)
		}
	}

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
	for _, c := range []struct{ topic, want string }{
		{"", "several image topics (/cam/image/compressed, /cam/image_raw): choose one with --topic"},
		{"/missing", `no topic "/missing"`},
		{"/pose", "carries geometry_msgs/msg/PoseStamped"},
	} {
		opt := DefaultOptions()
		opt.Topic = c.topic
		if _, err := OpenMCAP(path, opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("topic %q: %v, want %q", c.topic, err, c.want)
		}
	}
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
