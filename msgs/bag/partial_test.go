package bag

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// countMessages reads every message of a bag image and returns how many
// there were and the error that ended them.
func countMessages(t *testing.T, data []byte) (int, error) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatalf("NewReader: %v", err)
	}
	n := 0
	for _, err := range r.Messages() {
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// A bag cut short (the "bag cut in half") gives its messages up to
// the cut and then a *PartialError, never a silent clean end.
func TestCutBagIsPartial(t *testing.T) {
	path := filepath.Join(t.TempDir(), "full.bag")
	const n = 24
	writeTestBag(t, path, n, 400)
	full, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	chunkEnds := map[int64]bool{}
	for _, c := range r.chunks {
		chunkEnds[int64(c.pos)] = true
	}
	for _, cut := range []int{len(full) / 2, len(full) / 3, 2 * len(full) / 3} {
		got, err := countMessages(t, full[:cut])
		var pe *PartialError
		if !errors.As(err, &pe) {
			t.Fatalf("cut at %d: %d messages, then %v; want a *PartialError", cut, got, err)
		}
		if got == 0 || got >= 2*n || pe.Messages != got || pe.Size != int64(cut) || pe.Read <= 0 || pe.Read > int64(cut) {
			t.Errorf("cut at %d: %d messages, %+v", cut, got, *pe)
		}
		if !errors.Is(err, errFormat) {
			t.Errorf("cut at %d: %v does not wrap the format error", cut, err)
		}
	}
	// Cut exactly where a chunk begins: no partial record, but the header
	// still points at an index past the end.
	for pos := range chunkEnds {
		if pos < int64(len(full))/2 {
			continue
		}
		got, err := countMessages(t, full[:pos])
		var pe *PartialError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), "the file was cut short") || pe.Read != pos {
			t.Fatalf("cut at chunk start %d: %d messages, then %v", pos, got, err)
		}
		break
	}
}

// A corrupt chunk in an indexed bag is skipped: every message of the other
// chunks is still read, and the end says one chunk was skipped.
func TestCorruptChunkIsSkipped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.bag")
	const n = 24
	writeTestBag(t, path, n, 400)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.chunks) < 4 {
		t.Fatalf("test set-up: %d chunks", len(r.chunks))
	}
	// The first inner record's header length of the third chunk, set huge.
	c := r.chunks[2]
	rec, err := r.recordAt(int64(c.pos), r.end)
	if err != nil {
		t.Fatal(err)
	}
	inChunk := 0
	for _, k := range c.counts {
		inChunk += int(k)
	}
	copy(data[rec.dataPos:], []byte{0xff, 0xff, 0xff, 0x7f})
	got, err := countMessages(t, data)
	var pe *PartialError
	if !errors.As(err, &pe) {
		t.Fatalf("%d messages, then %v; want a *PartialError", got, err)
	}
	if got != 2*n-inChunk || pe.SkippedChunks != 1 || pe.SkippedBytes != rec.next-int64(c.pos) || pe.Read != r.end-pe.SkippedBytes {
		t.Errorf("%d messages (want %d), %+v", got, 2*n-inChunk, *pe)
	}
	if !strings.Contains(err.Error(), "1 corrupt chunks") || !strings.Contains(err.Error(), "overruns the chunk") {
		t.Errorf("message: %v", err)
	}

	// Framing lost (the chunk record's own header length broken): the index
	// leads to the next chunk.
	data2, _ := os.ReadFile(path)
	copy(data2[c.pos:], []byte{0xff, 0xff, 0xff, 0x7f})
	got, err = countMessages(t, data2)
	if !errors.As(err, &pe) || got != 2*n-inChunk || pe.SkippedChunks != 1 {
		t.Errorf("broken chunk record: %d messages, %v", got, err)
	}
}

// The writer writes whole bags or nothing.
func TestWriterIsAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.bag")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write("/camera/image_raw", stamp(0), testImage(0)); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Fatalf("the old file changed before Close: %q", b)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if in := r.Info(); !in.Indexed || in.Messages != 1 {
		t.Errorf("written bag: %+v", in)
	}
	r.Close()
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", st.Mode())
	}

	// Abort leaves the old file and no temporary file.
	w, err = Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write("/camera/image_raw", stamp(0), testImage(0)); err != nil {
		t.Fatal(err)
	}
	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("Close after Abort: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "a.bag" {
		t.Errorf("directory after Abort: %v", entries)
	}
	if r, err := Open(path); err != nil {
		t.Errorf("the closed bag is gone after an aborted rewrite: %v", err)
	} else {
		r.Close()
	}
}

// A bag of one uncompressed chunk, cut inside it: the whole records before
// the cut are still read (the "bag cut in half" with small frames).
func TestCutInsideTheOnlyChunk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "one.bag")
	const n = 24
	writeTestBag(t, path, n, 1<<20)
	full, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(bytes.NewReader(full), int64(len(full)))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.chunks) != 1 {
		t.Fatalf("test set-up: %d chunks", len(r.chunks))
	}
	got, err := countMessages(t, full[:len(full)/2])
	var pe *PartialError
	if !errors.As(err, &pe) || got == 0 || got >= 2*n || pe.Messages != got {
		t.Errorf("%d of %d messages, then %v", got, 2*n, err)
	}
}

// A bag cut inside its index (after the last chunk): every message is read,
// then the end says the index was cut.
func TestCutInsideTheIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "i.bag")
	const n = 12
	writeTestBag(t, path, n, 400)
	full, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := countMessages(t, full[:len(full)-10])
	var pe *PartialError
	if !errors.As(err, &pe) || got != 2*n || !strings.Contains(err.Error(), "every chunk was read, but the index after them is cut short") {
		t.Fatalf("%d of %d messages, then %v", got, 2*n, err)
	}
}
