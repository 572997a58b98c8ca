package mcapbag

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"

	"github.com/foxglove/mcap/go/mcap"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// The mcap library allocates what a record's length field says before it
// reads the record, trusts the summary's offsets and sizes, and uses a
// chunk whose CRC is wrong, so a damaged or hostile file could make it
// allocate gigabytes (which no recover can catch) or hand out damaged
// messages. Open therefore walks the whole file once with this bounded
// parser, which checks every chunk's CRC, and hands the library only a file
// that passed whole; a damaged file is read by this package alone.

// maxExpansion bounds a compressed chunk's claimed uncompressed size as a
// multiple of its compressed size (plus 1 MiB).
const maxExpansion = 1024

// footerSize is the footer record (opcode, length, 20 bytes) and the
// closing magic.
const footerSize = 1 + 8 + 20

// framing is what the walk found.
type framing struct {
	end     int64            // the well-formed prefix of the file: read no further
	records map[int64]uint64 // offset → body length of every top-level record read
	order   []int64          // their offsets, in file order
	ops     map[int64]mcap.OpCode
	chunks  map[int64]uint64 // offset → body length of every sound chunk record
	footer  *mcap.Footer     // the footer, when the file ends in one

	// What a damaged file is read from: the schemas and channels of the
	// summary and of the sound records, and their messages per channel.
	schemas  map[uint16]*mcap.Schema
	channels map[uint16]*mcap.Channel
	counts   map[uint16]uint64
	damage   *DamageError // nil for a sound file
}

// DamageError says that an MCAP file is damaged: cut short, a record whose
// length runs past the end of the file, or a chunk whose contents do not
// match its CRC or do not decompress. The messages of the sound chunks
// before and after the damage are read (after lost framing, from the next
// chunk the summary's chunk index lists); the fields say what was lost. It
// ends a reader's messages, after the last one, as the error.
type DamageError struct {
	Messages      int   // messages yielded (of the topics asked for), when it ends a read
	Size          int64 // bytes in the file
	SkippedChunks int   // damaged chunks left out
	SkippedBytes  int64 // their size
	LostBytes     int64 // bytes not read at all: framing lost, or the file cut short
	Err           error // the first problem found
}

func (e *DamageError) Error() string {
	msg := fmt.Sprintf("MCAP bag damaged, read only in part: %d messages", e.Messages)
	if e.SkippedChunks > 0 {
		msg += fmt.Sprintf(", %d damaged chunks (%d bytes) skipped", e.SkippedChunks, e.SkippedBytes)
	}
	if e.LostBytes > 0 {
		msg += fmt.Sprintf(", %d of its %d bytes unreadable", e.LostBytes, e.Size)
	}
	return msg + ": " + e.Err.Error()
}

func (e *DamageError) Unwrap() error { return e.Err }

func (fr *framing) damaged(err error) {
	if fr.damage == nil {
		fr.damage = &DamageError{Err: err}
	}
}

// walkFile checks the records of ra (size bytes) and the records inside every
// chunk: every length must fit in what holds it, every chunk must decompress
// to the size it claims (at most MaxChunkSize) and match its CRC. A chunk
// that fails is left out and the walk goes on after it. A record whose
// length runs past the file's end loses the framing: the walk goes on at
// the next chunk the summary's chunk index lists, or ends there. A file
// that ends without its footer was cut short. Each of these is damage
// (fr.damage). Only a file that does not start with the MCAP magic is an
// error.
func walkFile(ra io.ReaderAt, size int64) (*framing, error) {
	head := make([]byte, len(mcap.Magic))
	if _, err := ra.ReadAt(head, 0); err != nil || !bytes.Equal(head, mcap.Magic) {
		return nil, fmt.Errorf("not an MCAP file (no leading magic)")
	}
	fr := &framing{records: map[int64]uint64{}, ops: map[int64]mcap.OpCode{}, chunks: map[int64]uint64{},
		schemas: map[uint16]*mcap.Schema{}, channels: map[uint16]*mcap.Channel{}, counts: map[uint16]uint64{}}
	resume := fr.readSummary(ra, size)
	pos := int64(len(mcap.Magic))
	hdr := make([]byte, 9)
	var dec chunkDecoder
	defer dec.close()
	lost := false // the framing was lost for good
	for size-pos >= 9 {
		if _, err := ra.ReadAt(hdr, pos); err != nil {
			break
		}
		op, n := mcap.OpCode(hdr[0]), binary.LittleEndian.Uint64(hdr[1:])
		if n > uint64(size-pos-9) {
			fr.damaged(fmt.Errorf("the record at byte %d claims %d bytes, more than the %d left in the file (a file cut short, or a damaged length)", pos, n, size-pos-9))
			i, _ := slices.BinarySearch(resume, pos+1)
			if i == len(resume) {
				fr.damage.LostBytes += size - pos
				lost = true
				break
			}
			fr.damage.LostBytes += resume[i] - pos
			pos = resume[i]
			continue
		}
		switch op {
		case mcap.OpChunk:
			out, err := dec.decode(io.NewSectionReader(ra, pos+9, int64(n)), n)
			if err == nil {
				err = fr.learn(out, true)
			}
			if err != nil {
				fr.damaged(fmt.Errorf("the chunk at byte %d: %w", pos, err))
				fr.damage.SkippedChunks++
				fr.damage.SkippedBytes += 9 + int64(n)
				break
			}
			fr.chunks[pos] = n
		case mcap.OpSchema, mcap.OpChannel:
			if n <= 1<<20 {
				b := make([]byte, 9+n)
				if _, err := ra.ReadAt(b, pos); err == nil {
					_ = fr.learn(b, false)
				}
			}
		case mcap.OpMessage:
			var id [2]byte
			if _, err := ra.ReadAt(id[:], pos+9); err == nil && n >= 22 {
				fr.counts[binary.LittleEndian.Uint16(id[:])]++
			}
		case mcap.OpFooter:
			if n == 20 && size-(pos+9+20) == int64(len(mcap.Magic)) {
				b := make([]byte, 20)
				if _, err := ra.ReadAt(b, pos+9); err == nil {
					fr.footer, _ = mcap.ParseFooter(b)
				}
			}
		}
		fr.records[pos] = n
		fr.ops[pos] = op
		fr.order = append(fr.order, pos)
		pos += 9 + int64(n)
	}
	fr.end = pos
	if fr.footer != nil && size-pos == int64(len(mcap.Magic)) {
		fr.end = size
	} else {
		fr.footer = nil
		if !lost {
			fr.damaged(fmt.Errorf("the file ends at byte %d without its footer: it was cut short (or its recording did not finish)", size))
			fr.damage.LostBytes += size - pos
		}
	}
	if fr.damage != nil {
		fr.damage.Size = size
	}
	return fr, nil
}

// readSummary reads the summary section of a file that ends in a sound
// footer (its CRC checked when it has one), before the walk, so that the
// channels and the chunk index survive damage in the data section. It
// returns the chunk offsets of the chunk index, sorted.
func (fr *framing) readSummary(ra io.ReaderAt, size int64) []int64 {
	at := size - int64(len(mcap.Magic)) - footerSize
	if at < int64(len(mcap.Magic)) {
		return nil
	}
	tail := make([]byte, footerSize+len(mcap.Magic))
	if _, err := ra.ReadAt(tail, at); err != nil || !bytes.Equal(tail[footerSize:], mcap.Magic) ||
		mcap.OpCode(tail[0]) != mcap.OpFooter || binary.LittleEndian.Uint64(tail[1:9]) != 20 {
		return nil
	}
	f, err := mcap.ParseFooter(tail[9:footerSize])
	if err != nil || f.SummaryStart == 0 || f.SummaryStart >= uint64(at) || uint64(at)-f.SummaryStart > MaxChunkSize {
		return nil
	}
	sum := make([]byte, uint64(at)-f.SummaryStart)
	if _, err := ra.ReadAt(sum, int64(f.SummaryStart)); err != nil {
		return nil
	}
	if f.SummaryCRC != 0 {
		crc := crc32.Update(crc32.ChecksumIEEE(sum), crc32.IEEETable, tail[:9+16])
		if crc != f.SummaryCRC {
			return nil
		}
	}
	var starts []int64
	for len(sum) >= 9 {
		op, n := mcap.OpCode(sum[0]), binary.LittleEndian.Uint64(sum[1:9])
		if n > uint64(len(sum)-9) {
			break
		}
		body := sum[9 : 9+n]
		switch op {
		case mcap.OpSchema, mcap.OpChannel:
			_ = fr.learn(sum[:9+n], false)
		case mcap.OpChunkIndex:
			if ci, err := safeParse(mcap.ParseChunkIndex, body); err == nil && ci.ChunkStartOffset < uint64(size) {
				starts = append(starts, int64(ci.ChunkStartOffset))
			}
		}
		sum = sum[9+n:]
	}
	slices.Sort(starts)
	return slices.Compact(starts)
}

// learn takes the schemas and channels of recs, records as they are laid
// out in a chunk, and with count, counts their messages per channel.
func (fr *framing) learn(recs []byte, count bool) error {
	for len(recs) > 0 {
		if len(recs) < 9 {
			return errors.New("its records end inside a record header")
		}
		op, n := mcap.OpCode(recs[0]), binary.LittleEndian.Uint64(recs[1:9])
		if n > uint64(len(recs)-9) {
			return fmt.Errorf("a record in it claims %d bytes, more than the %d left", n, len(recs)-9)
		}
		body := recs[9 : 9+n]
		switch op {
		case mcap.OpSchema:
			if s, err := safeParse(mcap.ParseSchema, body); err == nil && fr.schemas[s.ID] == nil {
				s.Data = nil // not needed, and it would pin the buffer
				fr.schemas[s.ID] = s
			}
		case mcap.OpChannel:
			if c, err := safeParse(mcap.ParseChannel, body); err == nil && fr.channels[c.ID] == nil {
				fr.channels[c.ID] = c
			}
		case mcap.OpMessage:
			if count && n >= 22 {
				fr.counts[binary.LittleEndian.Uint16(body)]++
			}
		}
		recs = recs[9+n:]
	}
	return nil
}

// safeParse runs one of the library's record parsers on bytes that passed
// no check of ours, turning a panic into an error.
func safeParse[T any](parse func([]byte) (T, error), b []byte) (v T, err error) {
	err = safely(func() (err error) {
		v, err = parse(b)
		return err
	})
	return v, err
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

// chunkDecoder decompresses chunks, reusing its decoders and buffer.
type chunkDecoder struct {
	zstd *zstd.Decoder
	buf  []byte
}

func (d *chunkDecoder) close() {
	if d.zstd != nil {
		d.zstd.Close()
	}
}

// decode reads one chunk record body (n bytes) and returns its records,
// decompressed: its fields must fit, it must decompress to exactly the size
// it states and match its CRC (when it has one). The slice is valid until
// the next call.
func (d *chunkDecoder) decode(r *io.SectionReader, n uint64) ([]byte, error) {
	const fixed = 8 + 8 + 8 + 4 + 4 // start, end, uncompressed size, CRC, compression name length
	if n < fixed+8 {
		return nil, fmt.Errorf("%d bytes, too short for a chunk", n)
	}
	b := make([]byte, fixed)
	if _, err := r.ReadAt(b, 0); err != nil {
		return nil, err
	}
	usize := binary.LittleEndian.Uint64(b[16:])
	crc := binary.LittleEndian.Uint32(b[24:])
	nameLen := uint64(binary.LittleEndian.Uint32(b[28:]))
	if nameLen > 16 || fixed+nameLen+8 > n {
		return nil, fmt.Errorf("a compression name of %d bytes", nameLen)
	}
	name := make([]byte, nameLen+8)
	if _, err := r.ReadAt(name, fixed); err != nil {
		return nil, err
	}
	compression := mcap.CompressionFormat(name[:nameLen])
	clen := binary.LittleEndian.Uint64(name[nameLen:])
	if clen > n-fixed-nameLen-8 {
		return nil, fmt.Errorf("%d bytes of records claimed in a %d-byte chunk", clen, n)
	}
	if usize > MaxChunkSize {
		return nil, fmt.Errorf("an uncompressed size of %d bytes, more than %d", usize, MaxChunkSize)
	}
	data := io.NewSectionReader(r, int64(fixed+nameLen+8), int64(clen))
	var src io.Reader
	switch compression {
	case mcap.CompressionNone:
		if usize != clen {
			return nil, fmt.Errorf("uncompressed, but %d bytes stored for %d", clen, usize)
		}
		src = data
	case mcap.CompressionZSTD, mcap.CompressionLZ4:
		if usize > maxExpansion*clen+1<<20 {
			return nil, fmt.Errorf("%d bytes that claim to decompress to %d", clen, usize)
		}
		if compression == mcap.CompressionLZ4 {
			src = lz4.NewReader(data)
			break
		}
		if d.zstd == nil {
			z, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(MaxChunkSize))
			if err != nil {
				return nil, err
			}
			d.zstd = z
		}
		if err := d.zstd.Reset(data); err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		src = d.zstd
	default:
		return nil, fmt.Errorf("unknown compression %q", compression)
	}
	if uint64(cap(d.buf)) < usize {
		d.buf = make([]byte, usize)
	}
	out := d.buf[:usize]
	if _, err := io.ReadFull(src, out); err != nil {
		return nil, fmt.Errorf("decompressing (%s): %w", compression, err)
	}
	// Nothing may follow the stated size.
	if k, _ := src.Read(make([]byte, 1)); k != 0 {
		return nil, fmt.Errorf("it decompresses to more than the %d bytes it states", usize)
	}
	if crc != 0 {
		if got := crc32.ChecksumIEEE(out); got != crc {
			return nil, fmt.Errorf("CRC %08x, its contents give %08x", crc, got)
		}
	}
	return out, nil
}
