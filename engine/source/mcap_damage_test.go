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

	"github.com/lingbotmap/lingbotmap/msgs/mcapbag"
	"github.com/lingbotmap/lingbotmap/msgs/mcapbag/mcaptest"
)

// chunkedMCAP writes the frames as PNG on /cam/image/compressed, one
// uncompressed chunk each, with a summary, and returns the file's bytes and
// its chunks' offsets.
func chunkedMCAP(t *testing.T, n int) ([]byte, []int64) {
	t.Helper()
	var msgs []mcaptest.Message
	for _, m := range testImages(t, realFrames(t, n)) {
		msgs = append(msgs, mcaptest.Message{Msg: m.png, LogTime: m.rec})
	}
	return mcaptest.OneChunkEach(t, "/cam/image/compressed", typeCompressed2, msgs)
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
