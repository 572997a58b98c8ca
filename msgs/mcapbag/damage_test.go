package mcapbag

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/foxglove/mcap/go/mcap"

	"github.com/lingbotmap/lingbotmap/msgs/mcapbag/mcaptest"
)

// multiChunk writes n images on /cam, one chunk each (uncompressed, so that
// a flipped byte stays inside its message), with a full summary as rosbag2
// writes it, and returns the file and its chunks' offsets.
func multiChunk(t *testing.T, n int) ([]byte, []int64) {
	t.Helper()
	var msgs []mcaptest.Message
	for i := range n {
		msgs = append(msgs, mcaptest.Message{Msg: image(i), LogTime: at(i)})
	}
	b, chunks := mcaptest.OneChunkEach(t, "/cam", "sensor_msgs/msg/Image", msgs)
	fr, err := walkFile(bytes.NewReader(b), int64(len(b)))
	if err != nil || fr.damage != nil {
		t.Fatalf("the sound file: %v, damage %v", err, fr.damage)
	}
	for _, pos := range chunks {
		if _, ok := fr.chunks[pos]; !ok {
			t.Fatalf("the reader found no chunk at %d", pos)
		}
	}
	if len(fr.chunks) != n {
		t.Fatalf("the reader found %d chunks, want %d", len(fr.chunks), n)
	}
	return b, chunks
}

// readDamaged opens data and reads /cam: the stamps (in ms) read, and the
// error that ended the messages.
func readDamaged(t *testing.T, data []byte) (*Reader, []int, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "d.mcap")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Open(p)
	if err != nil {
		return nil, nil, err
	}
	t.Cleanup(func() { r.Close() })
	var got []int
	for m, err := range r.Messages("/cam") {
		if err != nil {
			return r, got, err
		}
		var im sensor_msgs.Image
		if err := m.Decode(&im); err != nil {
			t.Fatalf("message %d: %v", len(got), err)
		}
		got = append(got, int(im.Data[0]))
	}
	return r, got, nil
}

// A damaged MCAP file is found (chunk CRCs checked, lengths bounded), the
// messages of its sound chunks before and after the damage are read, and
// the damage ends the messages as a *DamageError that says what was lost:
// a flipped byte in a chunk, a wrong chunk CRC, an absurd chunk length (the
// framing found again through the summary's chunk index), damage in the
// first chunk (the channel found in the summary), a file cut short.
func TestReadDamaged(t *testing.T) {
	sound, chunks := multiChunk(t, 5)
	recordsAt := func(pos int64) int64 { // the first byte of a chunk's records
		nameLen := int64(binary.LittleEndian.Uint32(sound[pos+9+28:]))
		return pos + 9 + 32 + nameLen + 8
	}
	crcAt := func(pos int64) int64 { return pos + 9 + 24 }
	cases := []struct {
		name    string
		damage  func(b []byte) []byte
		want    []int
		skipped int
		lost    bool
		reason  string
	}{
		{"flipped byte in the third chunk", func(b []byte) []byte {
			b[len(b)-1-int(int64(len(b))-recordsAt(chunks[2]))+40] ^= 0x10
			return b
		}, []int{0, 1, 3, 4}, 1, false, "CRC"},
		{"wrong CRC of the second chunk", func(b []byte) []byte {
			b[crcAt(chunks[1])] ^= 1
			return b
		}, []int{0, 2, 3, 4}, 1, false, "CRC"},
		{"flipped byte in the first chunk", func(b []byte) []byte {
			b[recordsAt(chunks[0])+3] ^= 0x40
			return b
		}, []int{1, 2, 3, 4}, 1, false, "CRC"},
		{"absurd length of the second chunk", func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[chunks[1]+1:], 1<<50)
			return b
		}, []int{0, 2, 3, 4}, 0, true, "claims 1125899906842624 bytes"},
		{"cut inside the fourth chunk", func(b []byte) []byte {
			return b[:chunks[3]+20]
		}, []int{0, 1, 2}, 0, true, "cut short"},
		{"cut after the last chunk", func(b []byte) []byte {
			return b[:chunks[4]+9+int64(binary.LittleEndian.Uint64(b[chunks[4]+1:]))]
		}, []int{0, 1, 2, 3, 4}, 0, false, "without its footer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, got, err := readDamaged(t, c.damage(bytes.Clone(sound)))
			if r == nil {
				t.Fatalf("open: %v", err)
			}
			var de *DamageError
			if !errors.As(err, &de) {
				t.Fatalf("messages %v ended with %v, want a *DamageError", got, err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("messages %v, want %v", got, c.want)
			}
			if de.Messages != len(c.want) || de.SkippedChunks != c.skipped || (de.LostBytes > 0) != c.lost || !strings.Contains(err.Error(), c.reason) {
				t.Errorf("damage %+v: %v", de, err)
			}
			if d := r.Damage(); d == nil || len(r.Channels()) != 1 || r.Channels()[0].Type != "sensor_msgs/msg/Image" {
				t.Errorf("Damage() %v, channels %+v", d, r.Channels())
			}
		})
	}

	// Damage in the first chunk of a file cut short leaves no channel: an
	// error that says so, not an empty bag.
	b := bytes.Clone(sound[:chunks[4]])
	b[recordsAt(chunks[0])+3] ^= 0x40
	_, _, err := readDamaged(t, b)
	var de *DamageError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), "no channel could be read") {
		t.Errorf("first chunk damaged, no summary: %v", err)
	}

	// A sound file is not damaged.
	r, got, err := readDamaged(t, sound)
	if err != nil || r.Damage() != nil || len(got) != 5 {
		t.Errorf("sound file: %v, %v, damage %v", got, err, r.Damage())
	}
}

// Our own writer's files (zstd, one chunk): a flipped byte in the chunk is
// found, and the channels still come from the summary.
func TestReadDamagedCompressed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "z.mcap")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for ms := range 20 {
		if err := w.Write("/cam", at(ms), image(ms)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A byte in the middle of the chunk's compressed records, found through
	// the chunk index (the rosbag2 metadata record comes before the chunk).
	mr, err := mcap.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	info, err := mr.Info()
	if err != nil || len(info.ChunkIndexes) != 1 {
		t.Fatalf("chunk index: %v, %+v", err, info)
	}
	ci := info.ChunkIndexes[0]
	b[ci.ChunkStartOffset+ci.ChunkLength-ci.CompressedSize/2] ^= 0x01
	r, got, err := readDamaged(t, b)
	var de *DamageError
	if r == nil || !errors.As(err, &de) || len(got) != 0 || de.SkippedChunks != 1 {
		t.Fatalf("messages %v, error %v", got, err)
	}
	if len(r.Channels()) != 1 || r.Channels()[0].Topic != "/cam" {
		t.Errorf("channels %+v", r.Channels())
	}
}
