package bag

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"
)

// MD5 sums of real ROS (ros_comm, common_msgs), independent of goroslib.
const (
	md5Image       = "060021388200f6f0f447d0fcd9c64743"
	md5PoseStamped = "d3812c3cbc69362b77dc0b19b345f8f5"
	md5String      = "992ce8a1687cec8c8bd883ec73ca41d1"
)

var t0 = time.Unix(1700000000, 0)

// testImage is message i of the test stream: small, with content that
// depends on i so that any mix-up shows.
func testImage(i int) *sensor_msgs.Image {
	data := make([]byte, 4*3*3)
	for k := range data {
		data[k] = byte(i*7 + k)
	}
	return &sensor_msgs.Image{
		Header: std_msgs.Header{Seq: uint32(i), Stamp: stamp(i), FrameId: "camera"},
		Height: 3, Width: 4, Encoding: "rgb8", Step: 12, Data: data,
	}
}

func testPose(i int) *geometry_msgs.PoseStamped {
	return &geometry_msgs.PoseStamped{
		Header: std_msgs.Header{Seq: uint32(i), Stamp: stamp(i), FrameId: "map"},
		Pose: geometry_msgs.Pose{
			Position:    geometry_msgs.Point{X: float64(i), Y: 2 * float64(i), Z: -0.5},
			Orientation: geometry_msgs.Quaternion{W: 1},
		},
	}
}

func stamp(i int) time.Time { return t0.Add(time.Duration(i) * 100 * time.Millisecond) }

// writeTestBag writes n images on /camera/image_raw and n poses on /pose,
// interleaved, in chunks of chunkSize bytes.
func writeTestBag(t testing.TB, path string, n, chunkSize int) {
	t.Helper()
	w, err := WriterConfig{ChunkSize: chunkSize}.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := w.Write("/camera/image_raw", stamp(i), testImage(i)); err != nil {
			t.Fatal(err)
		}
		if err := w.Write("/pose", stamp(i).Add(time.Millisecond), *testPose(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rt.bag")
	const n = 50
	writeTestBag(t, path, n, 600) // several messages per chunk, many chunks
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	conns := r.Connections()
	if len(conns) != 2 {
		t.Fatalf("%d connections, want 2", len(conns))
	}
	if c := conns[0]; c.Topic != "/camera/image_raw" || c.Type != "sensor_msgs/Image" || c.MD5Sum != md5Image || c.Count != n ||
		!strings.Contains(c.MessageDefinition, "uint8[] data") || !strings.Contains(c.MessageDefinition, "MSG: std_msgs/Header") {
		t.Errorf("image connection %+v", c)
	}
	if c := conns[1]; c.Topic != "/pose" || c.Type != "geometry_msgs/PoseStamped" || c.MD5Sum != md5PoseStamped || c.Count != n {
		t.Errorf("pose connection %+v", c)
	}
	info := r.Info()
	if !info.Indexed || info.Messages != 2*n || info.Chunks < 10 || !info.Start.Equal(stamp(0)) || !info.End.Equal(stamp(n-1).Add(time.Millisecond)) {
		t.Errorf("info %+v", info)
	}

	i := 0
	for m, err := range r.Messages() {
		if err != nil {
			t.Fatal(err)
		}
		k := i / 2
		if i%2 == 0 {
			var img sensor_msgs.Image
			if err := m.Decode(&img); err != nil {
				t.Fatal(err)
			}
			want := testImage(k)
			if m.Topic != "/camera/image_raw" || !m.Time.Equal(stamp(k)) || img.Header.Seq != want.Header.Seq ||
				!img.Header.Stamp.Equal(want.Header.Stamp) || img.Header.FrameId != "camera" || img.Width != 4 ||
				img.Encoding != "rgb8" || !bytes.Equal(img.Data, want.Data) {
				t.Fatalf("message %d: %s at %v = %+v, want %+v", i, m.Topic, m.Time, img, want)
			}
		} else {
			var p geometry_msgs.PoseStamped
			if err := m.Decode(&p); err != nil {
				t.Fatal(err)
			}
			if m.Topic != "/pose" || p.Pose.Position != testPose(k).Pose.Position || p.Header.FrameId != "map" {
				t.Fatalf("message %d: %+v", i, p)
			}
		}
		i++
	}
	if i != 2*n {
		t.Fatalf("read %d messages, want %d", i, 2*n)
	}

	// Topic filter, and decoding into the wrong type.
	count := 0
	for m, err := range r.Messages("/pose") {
		if err != nil {
			t.Fatal(err)
		}
		if m.Topic != "/pose" {
			t.Fatalf("filter let %s through", m.Topic)
		}
		var img sensor_msgs.Image
		if err := m.Decode(&img); err == nil || !strings.Contains(err.Error(), "geometry_msgs/PoseStamped") {
			t.Fatalf("decoding a pose into an image: %v", err)
		}
		if err := m.Decode(geometry_msgs.PoseStamped{}); err == nil {
			t.Fatal("decoding into a non-pointer succeeded")
		}
		count++
	}
	if count != n {
		t.Fatalf("filtered %d poses, want %d", count, n)
	}
}

// A bag whose writer never closed has index_pos 0; the chunks written so far
// are still readable, as after a crash of rosbag record.
func TestUnindexedBag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "open.bag")
	w, err := WriterConfig{ChunkSize: 300}.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	const total = 11
	for i := range total {
		if err := w.Write("/camera/image_raw", stamp(i), testImage(i)); err != nil {
			t.Fatal(err)
		}
	}
	defer w.Close()
	flushed := total - len(w.chunkIndex[0])
	if flushed == 0 || flushed == total {
		t.Fatalf("test set-up: %d of %d messages flushed; want some but not all", flushed, total)
	}
	// Until Close the bag grows in a temporary file; nothing is at path.
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s exists before Close: %v", path, err)
	}
	data, err := os.ReadFile(w.f.Name())
	if err != nil {
		t.Fatal(err)
	}
	// As the recorder left it (ending on a record boundary): all of it is
	// read, with no complaint.
	n, err := readImages(t, data)
	if n != flushed || err != nil {
		t.Fatalf("read %d messages and %v, want the %d in flushed chunks and no error", n, err, flushed)
	}
	// A partial record at the end, as a crash mid-write leaves: the same
	// messages, then a *PartialError saying how much was used.
	data = append(data, []byte{0x20, 0, 0, 0, 'o', 'p'}...)
	n, err = readImages(t, data)
	var pe *PartialError
	if n != flushed || !errors.As(err, &pe) {
		t.Fatalf("read %d messages and %v, want %d and a *PartialError", n, err, flushed)
	}
	if pe.Messages != flushed || pe.Read != int64(len(data)-6) || pe.Size != int64(len(data)) || pe.SkippedChunks != 0 {
		t.Errorf("partial: %+v", *pe)
	}
	want := fmt.Sprintf("bag read only in part: %d messages from %d of its %d bytes: not a valid ROS bag 2.0 file: truncated record: record header at offset %d (32 bytes) overruns the file",
		flushed, len(data)-6, len(data), len(data)-6)
	if err.Error() != want {
		t.Errorf("message\n%s\nwant\n%s", err, want)
	}
}

// readImages reads a bag image's messages in order, checking that message i
// is test image i, and returns how many there were and the error that ended
// them.
func readImages(t *testing.T, data []byte) (int, error) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if r.Info().Indexed || len(r.Connections()) != 1 {
		t.Fatalf("info %+v, %d connections", r.Info(), len(r.Connections()))
	}
	n := 0
	for m, err := range r.Messages() {
		if err != nil {
			return n, err
		}
		var img sensor_msgs.Image
		if err := m.Decode(&img); err != nil || img.Header.Seq != uint32(n) {
			t.Fatalf("message %d: seq %d, %v", n, img.Header.Seq, err)
		}
		n++
	}
	return n, nil
}

func TestWriterErrors(t *testing.T) {
	w, err := Create(filepath.Join(t.TempDir(), "e.bag"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write("/x", time.Time{}, testImage(0)); err == nil {
		t.Error("a year-1 time was accepted")
	}
	if err := w.Write("", t0, testImage(0)); err == nil {
		t.Error("an empty topic was accepted")
	}
	if err := w.Write("/x", t0, 42); err == nil {
		t.Error("an int message was accepted")
	}
	if err := w.Write("/x", t0, (*sensor_msgs.Image)(nil)); err == nil {
		t.Error("a nil message was accepted")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Write("/x", t0, testImage(0)); err == nil {
		t.Error("write after close was accepted")
	}
	if _, err := Create(filepath.Join(t.TempDir(), "no", "such", "dir.bag")); err == nil {
		t.Error("creating in a missing directory succeeded")
	}
}

func TestReaderRejects(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ok.bag")
	writeTestBag(t, path, 3, 1<<20)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string][]byte{
		"empty":          nil,
		"wrong magic":    append([]byte("#ROSBAG V1.2\n"), good[13:]...),
		"no bag header":  good[:20],
		"truncated file": good[:len(good)-10],
	}
	for name, data := range cases {
		r, err := NewReader(bytes.NewReader(data), int64(len(data)))
		if err == nil {
			for _, err = range r.Messages() {
				if err != nil {
					break
				}
			}
		}
		if !errors.Is(err, errFormat) {
			t.Errorf("%s: error %v, want a format error", name, err)
		}
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing.bag")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// Reading streams record by record: the heap stays far below the bag size.
func TestReaderMemoryBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.bag")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	const n, size = 192, 320 * 1024 // 60 MiB of images
	img := &sensor_msgs.Image{Width: size / 4, Height: 1, Encoding: "rgba8", Step: size, Data: make([]byte, size)}
	for i := range n {
		img.Header.Seq = uint32(i)
		img.Data[0] = byte(i)
		if err := w.Write("/big", stamp(i), img); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	runtime.GC()
	var ms runtime.MemStats
	peak, count := uint64(0), 0
	for m, err := range r.Messages() {
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Data) < size || m.Data[len(m.Data)-size] != byte(count) {
			t.Fatalf("message %d has wrong data", count)
		}
		count++
		if count%8 == 0 {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
		}
	}
	if count != n {
		t.Fatalf("read %d messages, want %d", count, n)
	}
	t.Logf("bag %d MiB, peak heap while reading %.1f MiB", st.Size()>>20, float64(peak)/(1<<20))
	if peak > 24<<20 {
		t.Errorf("peak heap %d MiB while streaming a %d MiB bag", peak>>20, st.Size()>>20)
	}
}

func ExampleWriter() {
	dir, _ := os.MkdirTemp("", "bag")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "hello.bag")
	w, _ := Create(path)
	_ = w.Write("/chatter", time.Unix(1700000000, 0), &std_msgs.String{Data: "hello"})
	_ = w.Close()

	r, _ := Open(path)
	defer r.Close()
	for m, err := range r.Messages() {
		if err != nil {
			break
		}
		var s std_msgs.String
		_ = m.Decode(&s)
		fmt.Println(m.Topic, m.Type, m.Conn.MD5Sum == md5String, m.Time.Unix(), s.Data)
	}
	// Output: /chatter std_msgs/String true 1700000000 hello
}
