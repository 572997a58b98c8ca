package source

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/foxglove/mcap/go/mcap"

	"github.com/lingbotmap/lingbotmap/msgs/cdr"
	"github.com/lingbotmap/lingbotmap/msgs/mcapbag"
)

// chunkedMCAP writes the frames as PNG on /cam/image/compressed, one
// uncompressed chunk each, with a summary, and returns the file's bytes and
// its chunks' offsets.
func chunkedMCAP(t *testing.T, n int) ([]byte, []int64) {
	t.Helper()
	var buf bytes.Buffer
	w, err := mcap.NewWriter(&buf, &mcap.WriterOptions{IncludeCRC: true, Chunked: true, ChunkSize: 1, Compression: mcap.CompressionNone})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.WriteHeader(&mcap.Header{Profile: mcapbag.Profile}))
	must(w.WriteSchema(&mcap.Schema{ID: 1, Name: typeCompressed2, Encoding: "ros2msg", Data: []byte("x")}))
	must(w.WriteChannel(&mcap.Channel{ID: 1, SchemaID: 1, Topic: "/cam/image/compressed", MessageEncoding: mcapbag.MessageEncoding}))
	for i, m := range testImages(t, realFrames(t, n)) {
		data, err := cdr.Marshal(m.png)
		must(err)
		must(w.WriteMessage(&mcap.Message{ChannelID: 1, Sequence: uint32(i), LogTime: uint64(m.rec.UnixNano()), Data: data}))
	}
	must(w.Close())
	b := buf.Bytes()
	var chunks []int64
	for pos := int64(len(mcap.Magic)); pos+9 <= int64(len(b)); pos += 9 + int64(binary.LittleEndian.Uint64(b[pos+1:])) {
		if mcap.OpCode(b[pos]) == mcap.OpChunk {
			chunks = append(chunks, pos)
		}
	}
	if len(chunks) != n {
		t.Fatalf("%d chunks, want %d", len(chunks), n)
	}
	return b, chunks
}

// A damaged MCAP bag is partial input, as a damaged ROS 1 bag is: the
// frames of the sound chunks before and after the damage, then ErrPartial
// saying how many were used, not a clean end. Damage in the first chunk is
// the same, not "no image topic".
func TestDamagedMCAPIsPartial(t *testing.T) {
	sound, chunks := chunkedMCAP(t, 5)
	for _, c := range []struct {
		name   string
		damage func([]byte) []byte
		frames int
	}{
		{"flipped byte in chunk 3", func(b []byte) []byte { b[chunks[2]+200] ^= 0x08; return b }, 4},
		{"flipped byte in chunk 1", func(b []byte) []byte { b[chunks[0]+200] ^= 0x08; return b }, 4},
		{"wrong CRC of chunk 2", func(b []byte) []byte { b[chunks[1]+9+24] ^= 0x01; return b }, 4},
		{"absurd length of chunk 2", func(b []byte) []byte { binary.LittleEndian.PutUint64(b[chunks[1]+1:], 1<<40); return b }, 4},
		{"cut inside chunk 4", func(b []byte) []byte { return b[:chunks[3]+100] }, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "damaged.mcap")
			if err := os.WriteFile(path, c.damage(bytes.Clone(sound)), 0o644); err != nil {
				t.Fatal(err)
			}
			src, err := Open(context.Background(), path, DefaultOptions())
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer src.Close()
			n, err := readUntilError(t, src)
			var de *mcapbag.DamageError
			if !errors.Is(err, ErrPartial) || !errors.As(err, &de) {
				t.Fatalf("%d frames, then %v; want ErrPartial with a *mcapbag.DamageError", n, err)
			}
			if n != c.frames || !strings.Contains(err.Error(), "frames were used") || !strings.Contains(err.Error(), "damaged.mcap") {
				t.Errorf("%d frames, want %d; %v", n, c.frames, err)
			}
		})
	}
	// damage that leaves no channel at all is partial input too
	b := bytes.Clone(sound[:chunks[4]])
	b[chunks[0]+200] ^= 0x08
	path := filepath.Join(t.TempDir(), "nochannel.mcap")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), path, DefaultOptions()); !errors.Is(err, ErrPartial) || !strings.Contains(err.Error(), "no channel could be read") {
		t.Errorf("no channel left: %v", err)
	}
}
