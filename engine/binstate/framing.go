package binstate

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
)

// The session files of run and the node (run.state, node.state) share their
// framing: an 8-byte magic, a uint32 length and a JSON header, then
// sections of fields that each end in a CRC-32C of their bytes.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// WriteHeader writes magic, the length of js as a uint32, and js.
func WriteHeader(w io.Writer, magic [8]byte, js []byte) error {
	var hdr [12]byte
	copy(hdr[:8], magic[:])
	binary.LittleEndian.PutUint32(hdr[8:], uint32(len(js)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(js)
	return err
}

// WriteSummed writes the fields fill writes, then their CRC-32C.
func WriteSummed(w io.Writer, fill func(*Writer) error) error {
	sum := crc32.New(castagnoli)
	bw := NewWriter(io.MultiWriter(w, sum))
	if err := fill(bw); err != nil {
		return err
	}
	bw.U32(sum.Sum32())
	return bw.Err()
}

// ReadSummed reads a section WriteSummed wrote: the fields read reads, then
// the CRC-32C, which must match them. A missing checksum is ErrCorrupt and
// also the read error (io.ErrUnexpectedEOF or io.EOF).
func ReadSummed(r io.Reader, read func(*Reader) error) error {
	sum := crc32.New(castagnoli)
	br := NewReader(io.TeeReader(r, sum))
	if err := read(br); err != nil {
		return err
	}
	if err := br.Err(); err != nil {
		return err
	}
	want := sum.Sum32()
	var tail [4]byte
	if _, err := io.ReadFull(r, tail[:]); err != nil {
		return fmt.Errorf("%w: checksum missing (the file ends early): %w", ErrCorrupt, err)
	}
	if got := binary.LittleEndian.Uint32(tail[:]); got != want {
		return fmt.Errorf("%w: checksum %08x, content gives %08x", ErrCorrupt, got, want)
	}
	return nil
}
