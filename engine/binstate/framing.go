package binstate

import (
	"bytes"
	"encoding/binary"
	"errors"
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

// ErrUnproven marks a session file of an older format whose header (the
// input, the position, the settings) carries no checksum: a flipped bit in
// it cannot be found, so it is not resumed.
var ErrUnproven = errors.New("session saved by an older version of lingbotmap: its header carries no checksum, so it cannot be proven intact")

// WriteHeaderSummed writes magic, the length of js as a uint32, js, and a
// CRC-32C of all of them, so that a reader proves the header before it
// trusts it.
func WriteHeaderSummed(w io.Writer, magic [8]byte, js []byte) error {
	b := make([]byte, 0, 12+len(js)+4)
	b = append(b, magic[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(js)))
	b = append(b, js...)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	_, err := w.Write(b)
	return err
}

// ReadHeaderSummed reads a header WriteHeaderSummed wrote with magic and
// returns its JSON, once its checksum matches. A file that starts with one
// of older (the magics of the format's versions without a header checksum)
// is ErrUnproven; a header longer than limit, cut short or whose checksum
// does not match is ErrCorrupt.
func ReadHeaderSummed(r io.Reader, magic [8]byte, limit int, older ...[8]byte) ([]byte, error) {
	var pre [12]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return nil, fmt.Errorf("not a session file (%d-byte header missing): %w", len(pre), err)
	}
	for _, o := range older {
		if bytes.Equal(pre[:8], o[:]) {
			return nil, ErrUnproven
		}
	}
	if !bytes.Equal(pre[:8], magic[:]) {
		return nil, fmt.Errorf("not a session file of this kind (magic %q, want %q)", pre[:8], magic[:])
	}
	n := binary.LittleEndian.Uint32(pre[8:])
	if uint64(n) > uint64(limit) {
		return nil, fmt.Errorf("%w: a session header of %d bytes, over the %d-byte limit", ErrCorrupt, n, limit)
	}
	b := make([]byte, n+4)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("%w: the session header is cut short: %w", ErrCorrupt, err)
	}
	sum := crc32.Update(crc32.Checksum(pre[:], castagnoli), castagnoli, b[:n])
	if got := binary.LittleEndian.Uint32(b[n:]); got != sum {
		return nil, fmt.Errorf("%w: session header checksum %08x, its content gives %08x", ErrCorrupt, got, sum)
	}
	return b[:n], nil
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
