package mcapbag

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/foxglove/mcap/go/mcap"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// The mcap library allocates what a record's length field says before it
// reads the record, and trusts the summary's offsets and sizes, so a damaged
// or hostile file could make it allocate gigabytes, which no recover can
// catch. Open therefore walks the whole file once with this bounded parser
// and hands the library only what passed.

// maxExpansion bounds a compressed chunk's claimed uncompressed size as a
// multiple of its compressed size (plus 1 MiB).
const maxExpansion = 1024

// framing is what the walk found.
type framing struct {
	end     int64            // the well-formed prefix of the file: read no further
	records map[int64]uint64 // offset → body length of every top-level record in it
	chunks  map[int64]uint64 // offset → body length of every chunk record
	footer  *mcap.Footer     // the footer, when the file is complete
}

// walkFile checks the records of ra (size bytes) and the records inside every
// chunk: every length must fit in what holds it, every chunk must decompress
// to the size it claims (at most MaxChunkSize). The walk stops at the first
// record that fails, and the file is read only up to there: a recording that
// stopped mid-write simply ends at its last whole record. Only a file that
// does not start with the MCAP magic is an error.
func walkFile(ra io.ReaderAt, size int64) (*framing, error) {
	head := make([]byte, len(mcap.Magic))
	if _, err := ra.ReadAt(head, 0); err != nil || !bytes.Equal(head, mcap.Magic) {
		return nil, fmt.Errorf("not an MCAP file (no leading magic)")
	}
	fr := &framing{records: map[int64]uint64{}, chunks: map[int64]uint64{}}
	pos := int64(len(mcap.Magic))
	hdr := make([]byte, 9)
	var dec chunkDecoder
	defer dec.close()
	for size-pos >= 9 {
		if _, err := ra.ReadAt(hdr, pos); err != nil {
			break
		}
		op, n := mcap.OpCode(hdr[0]), binary.LittleEndian.Uint64(hdr[1:])
		if n > uint64(size-pos-9) {
			break
		}
		if op == mcap.OpChunk {
			if !dec.check(io.NewSectionReader(ra, pos+9, int64(n)), n) {
				break
			}
			fr.chunks[pos] = n
		}
		if op == mcap.OpFooter && n == 20 && size-(pos+9+20) == int64(len(mcap.Magic)) {
			b := make([]byte, 20)
			if _, err := ra.ReadAt(b, pos+9); err == nil {
				fr.footer = &mcap.Footer{SummaryStart: binary.LittleEndian.Uint64(b), SummaryOffsetStart: binary.LittleEndian.Uint64(b[8:])}
			}
		}
		fr.records[pos] = n
		pos += 9 + int64(n)
	}
	fr.end = pos
	if fr.footer != nil && size-pos == int64(len(mcap.Magic)) {
		fr.end = size
	} else {
		fr.footer = nil
	}
	return fr, nil
}

// summaryUsable says whether the library may read the summary: the file is
// complete and the footer points at a record boundary.
func (fr *framing) summaryUsable() bool {
	if fr.footer == nil {
		return false
	}
	s := fr.footer.SummaryStart
	if s == 0 {
		return true
	}
	_, ok := fr.records[int64(s)]
	return s <= uint64(fr.end) && ok
}

// chunkIndexOK says whether a chunk index of the summary points at a real
// chunk record, with its true length.
func (fr *framing) chunkIndexOK(ci *mcap.ChunkIndex) bool {
	if ci.ChunkStartOffset > uint64(fr.end) {
		return false
	}
	n, ok := fr.chunks[int64(ci.ChunkStartOffset)]
	return ok && ci.ChunkLength == 9+n && ci.UncompressedSize <= MaxChunkSize
}

// chunkDecoder decompresses chunks for the walk, reusing its decoders.
type chunkDecoder struct {
	zstd *zstd.Decoder
	buf  []byte
}

func (d *chunkDecoder) close() {
	if d.zstd != nil {
		d.zstd.Close()
	}
}

// check reads one chunk record body (n bytes) and reports whether its fields
// fit, it decompresses to exactly the size it states, and the records inside
// it fit in that size.
func (d *chunkDecoder) check(r *io.SectionReader, n uint64) bool {
	const fixed = 8 + 8 + 8 + 4 + 4 // start, end, uncompressed size, CRC, compression name length
	if n < fixed+8 {
		return false
	}
	b := make([]byte, fixed)
	if _, err := r.ReadAt(b, 0); err != nil {
		return false
	}
	usize := binary.LittleEndian.Uint64(b[16:])
	nameLen := uint64(binary.LittleEndian.Uint32(b[28:]))
	if nameLen > 16 || fixed+nameLen+8 > n {
		return false
	}
	name := make([]byte, nameLen+8)
	if _, err := r.ReadAt(name, fixed); err != nil {
		return false
	}
	compression := mcap.CompressionFormat(name[:nameLen])
	clen := binary.LittleEndian.Uint64(name[nameLen:])
	if clen > n-fixed-nameLen-8 || usize > MaxChunkSize {
		return false
	}
	data := io.NewSectionReader(r, int64(fixed+nameLen+8), int64(clen))
	var src io.Reader
	switch compression {
	case mcap.CompressionNone:
		if usize != clen {
			return false
		}
		src = data
	case mcap.CompressionZSTD, mcap.CompressionLZ4:
		if usize > maxExpansion*clen+1<<20 {
			return false
		}
		if compression == mcap.CompressionLZ4 {
			src = lz4.NewReader(data)
			break
		}
		if d.zstd == nil {
			z, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(MaxChunkSize))
			if err != nil {
				return false
			}
			d.zstd = z
		}
		if err := d.zstd.Reset(data); err != nil {
			return false
		}
		src = d.zstd
	default:
		return false
	}
	if uint64(cap(d.buf)) < usize {
		d.buf = make([]byte, usize)
	}
	out := d.buf[:usize]
	if _, err := io.ReadFull(src, out); err != nil {
		return false
	}
	// Nothing may follow the stated size.
	if k, _ := src.Read(make([]byte, 1)); k != 0 {
		return false
	}
	for len(out) > 0 {
		if len(out) < 9 {
			return false
		}
		l := binary.LittleEndian.Uint64(out[1:9])
		if l > uint64(len(out)-9) {
			return false
		}
		out = out[9+l:]
	}
	return true
}
