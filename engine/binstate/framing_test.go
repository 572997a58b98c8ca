package binstate

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestSummed: a section comes back whole; a changed byte or a missing
// checksum is ErrCorrupt, and a cut file also says it ended early.
func TestSummed(t *testing.T) {
	var buf bytes.Buffer
	magic := [8]byte{'T', 'E', 'S', 'T', 0, 0, 0, 1}
	if err := WriteHeader(&buf, magic, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := WriteSummed(&buf, func(w *Writer) error { w.Int(42); return nil }); err != nil {
		t.Fatal(err)
	}
	file := buf.Bytes()
	if !bytes.Equal(file[:8], magic[:]) || file[8] != 2 || string(file[12:14]) != "{}" {
		t.Fatalf("header % x", file[:14])
	}
	read := func(data []byte) (int, error) {
		var got int
		err := ReadSummed(bytes.NewReader(data), func(r *Reader) error {
			got = r.Int("n", 0, 100)
			return nil
		})
		return got, err
	}
	body := file[14:]
	if got, err := read(body); err != nil || got != 42 {
		t.Fatalf("read back %d, %v", got, err)
	}
	bad := bytes.Clone(body)
	bad[0] ^= 1
	if _, err := read(bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("changed byte: %v, want ErrCorrupt", err)
	}
	if _, err := read(body[:len(body)-2]); !errors.Is(err, ErrCorrupt) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut checksum: %v, want ErrCorrupt and io.ErrUnexpectedEOF", err)
	}
}

// A summed header comes back only whole: every flipped bit of it (magic
// aside, which names the file) is found, a cut one too, and the header of
// an older format, which had no checksum, is ErrUnproven, not read.
func TestHeaderSummed(t *testing.T) {
	magic := [8]byte{'T', 'E', 'S', 'T', 0, 0, 0, 2}
	old := [8]byte{'T', 'E', 'S', 'T', 0, 0, 0, 1}
	js := []byte(`{"input":"/data/cam.bag","frames_read":40,"engine":{"image_width":518}}`)
	var buf bytes.Buffer
	if err := WriteHeaderSummed(&buf, magic, js); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("body")
	file := buf.Bytes()
	r := bytes.NewReader(file)
	got, err := ReadHeaderSummed(r, magic, 1<<10, old)
	if err != nil || !bytes.Equal(got, js) {
		t.Fatalf("read back %q, %v", got, err)
	}
	if rest, _ := io.ReadAll(r); string(rest) != "body" {
		t.Fatalf("the body after the header: %q", rest)
	}
	for i := 8; i < 12+len(js)+4; i++ {
		for bit := range 8 {
			bad := bytes.Clone(file)
			bad[i] ^= 1 << bit
			if _, err := ReadHeaderSummed(bytes.NewReader(bad), magic, 1<<10, old); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("bit %d of byte %d flipped: %v, want ErrCorrupt", bit, i, err)
			}
		}
	}
	if _, err := ReadHeaderSummed(bytes.NewReader(file[:20]), magic, 1<<10, old); !errors.Is(err, ErrCorrupt) {
		t.Errorf("cut header: %v", err)
	}
	var prev bytes.Buffer
	if err := WriteHeader(&prev, old, js); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadHeaderSummed(bytes.NewReader(prev.Bytes()), magic, 1<<10, old); !errors.Is(err, ErrUnproven) || !strings.Contains(err.Error(), "older version") {
		t.Errorf("an older header: %v, want ErrUnproven", err)
	}
	if _, err := ReadHeaderSummed(bytes.NewReader([]byte("LBMSTATE\x03\x00\x00\x00....")), magic, 1<<10, old); err == nil || errors.Is(err, ErrCorrupt) {
		t.Errorf("another kind of file: %v", err)
	}
}
