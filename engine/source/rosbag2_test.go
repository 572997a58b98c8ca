package source

import (
	"context"
	"errors"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"

	"github.com/lingbotmap/lingbotmap/msgs/mcapbag"
	"github.com/lingbotmap/lingbotmap/msgs/rosbag2"
)

// writeSplitBag writes a rosbag2 bag directory of MCAP splits of the given
// sizes on /cam (frame i has every pixel i), with metadata.yaml listing them
// (msgs/rosbag2's tests cover every storage and compression; this is the
// source's view).
func writeSplitBag(t *testing.T, sizes ...int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "rec")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	meta := "rosbag2_bagfile_information:\n  version: 9\n  storage_identifier: mcap\n  relative_file_paths:\n"
	i, total := 0, 0
	for k, n := range sizes {
		name := fmt.Sprintf("rec_%d.mcap", k)
		meta += "    - " + name + "\n"
		w, err := mcapbag.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < n; j, i = j+1, i+1 {
			px := make([]byte, 4*2)
			for p := range px {
				px[p] = uint8(i)
			}
			m := &sensor_msgs.Image{Header: std_msgs.Header{Stamp: time.Unix(1700000000+int64(i), 0), FrameId: "cam"},
				Width: 4, Height: 2, Encoding: "mono8", Step: 4, Data: px}
			if err := w.Write("/cam", time.Unix(1700000000+int64(i), 0), m); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		total += n
	}
	meta += fmt.Sprintf("  topics_with_message_count:\n    - topic_metadata:\n        name: /cam\n        type: sensor_msgs/msg/Image\n        serialization_format: cdr\n        offered_qos_profiles: []\n      message_count: %d\n", total)
	if err := os.WriteFile(filepath.Join(dir, rosbag2.MetadataFile), []byte(meta), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func readFirstBytes(t *testing.T, s Source) ([]uint8, error) {
	t.Helper()
	var got []uint8
	for {
		f, err := s.Next(context.Background())
		if err == io.EOF {
			return got, nil
		}
		if err != nil {
			return got, err
		}
		got = append(got, color.RGBAModel.Convert(f.Image.At(0, 0)).(color.RGBA).R)
	}
}

// Open takes a bag directory for a rosbag2 bag, not an image folder, and
// reads its splits in order with the selection options.
func TestOpenROS2BagDirectory(t *testing.T) {
	dir := writeSplitBag(t, 3, 2, 4)
	opt := DefaultOptions()
	opt.Stride = 2
	s, err := Open(context.Background(), dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*ROS2Bag); !ok || s.Len() != 5 || !strings.Contains(s.Describe(), "rosbag2 bag (mcap, 3 split files)") {
		t.Fatalf("%T len %d %q", s, s.Len(), s.Describe())
	}
	got, err := readFirstBytes(t, s)
	if err != nil || fmt.Sprint(got) != "[0 2 4 6 8]" {
		t.Fatalf("got %v, %v", got, err)
	}
}

// A missing split: the frames of the others are read, then ErrPartial says
// how many were used and which file is missing.
func TestROS2BagMissingSplitIsPartial(t *testing.T) {
	dir := writeSplitBag(t, 3, 2, 4)
	if err := os.Remove(filepath.Join(dir, "rec_1.mcap")); err != nil {
		t.Fatal(err)
	}
	s, err := Open(context.Background(), dir, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := readFirstBytes(t, s)
	if !errors.Is(err, ErrPartial) || fmt.Sprint(got) != "[0 1 2 5 6 7 8]" ||
		!strings.Contains(err.Error(), "7 frames were used") || !strings.Contains(err.Error(), "split file rec_1.mcap is missing") {
		t.Fatalf("got %v, %v", got, err)
	}
}
