package binstate

import (
	"bytes"
	"errors"
	"io"
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
