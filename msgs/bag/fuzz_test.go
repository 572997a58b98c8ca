package bag

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
)

// testdata/python_{bz2,lz4}.bag were written once by Python rosbag (the
// pyWrite script with n=4), so the compressed paths are covered even where
// the ROS tools are absent.
func TestReadPythonTestdata(t *testing.T) {
	for _, name := range []string{"python_bz2.bag", "python_lz4.bag"} {
		t.Run(name, func(t *testing.T) { checkPythonBag(t, filepath.Join("testdata", name), 4) })
	}
}

// FuzzBagReader: no panic and bounded memory on any bytes. Run longer with
// go test ./msgs/bag -run '^$' -fuzz FuzzBagReader -fuzztime 60s -fuzzminimizetime 2s
// (minimising an interesting input at the default 60 s looks like a stall:
// every bz2 chunk costs the decoder a 3.6 MB block buffer).
func FuzzBagReader(f *testing.F) {
	py, err := os.ReadFile(filepath.Join("testdata", "python_bz2.bag"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(py)
	lz, err := os.ReadFile(filepath.Join("testdata", "python_lz4.bag"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(lz)
	path := filepath.Join(f.TempDir(), "seed.bag")
	writeTestBag(f, path, 3, 400)
	ours, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ours)
	f.Add(ours[:len(ours)/2])
	f.Add([]byte(magic))
	cfg := ReaderConfig{MaxRecordSize: 1 << 20}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := cfg.NewReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		_ = r.Connections()
		_ = r.Info()
		for m, err := range r.Messages() {
			if err != nil {
				return
			}
			if len(m.Data) > len(data)*64+1<<20 {
				t.Fatalf("a %d-byte message from a %d-byte input", len(m.Data), len(data))
			}
			if m.Type == "sensor_msgs/Image" {
				var img sensor_msgs.Image
				_ = m.Decode(&img)
			}
		}
	})
}

func TestLZ4BlockOverlappingMatch(t *testing.T) {
	// "ab", then a 6-byte match at offset 2 (overlapping itself), then "c".
	src := []byte{0x22, 'a', 'b', 0x02, 0x00, 0x10, 'c'}
	out, err := lz4Block(nil, src, 64)
	if err != nil || string(out) != "ababababc" {
		t.Fatalf("got %q, %v; want \"ababababc\"", out, err)
	}
	for name, bad := range map[string][]byte{
		"offset zero":       {0x22, 'a', 'b', 0x00, 0x00, 0x10, 'c'},
		"offset past start": {0x22, 'a', 'b', 0x09, 0x00, 0x10, 'c'},
		"literals overrun":  {0x50, 'a'},
		"over the limit":    {0x2F, 'a', 'b', 0x01, 0x00, 0xFF, 0x10, 0x10, 'c'},
	} {
		if _, err := lz4Block(nil, bad, 64); !errors.Is(err, errFormat) {
			t.Errorf("%s: error %v, want a format error", name, err)
		}
	}
}

func FuzzLZ4Block(f *testing.F) {
	f.Add([]byte{0x22, 'a', 'b', 0x02, 0x00, 0x10, 'c'})
	f.Fuzz(func(t *testing.T, src []byte) {
		const limit = 1 << 16
		if out, err := lz4Block(nil, src, limit); err == nil && len(out) > limit {
			t.Fatalf("%d bytes out, over the %d limit", len(out), limit)
		}
	})
}
