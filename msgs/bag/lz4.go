package bag

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// lz4Reader decompresses the LZ4 frame format (lz4.github.io/lz4, frame
// format 1.6), which rosbag's roslz4 writes for compression=lz4 chunks.
// Checksums are skipped, not verified: a damaged chunk still fails on its
// record structure.
type lz4Reader struct {
	r        io.Reader
	started  bool
	done     bool
	blockMax int
	blockSum bool // each block is followed by a 4-byte checksum
	contSum  bool // the frame ends with a 4-byte content checksum
	in       []byte
	out      []byte // decompressed bytes not yet returned
	buf      []byte
}

const lz4Magic = 0x184D2204

func newLZ4Reader(r io.Reader) *lz4Reader { return &lz4Reader{r: r} }

var errLZ4 = fmt.Errorf("%w: bad lz4 chunk", errFormat)

func (z *lz4Reader) readHeader() error {
	var h [7]byte
	if _, err := io.ReadFull(z.r, h[:6]); err != nil {
		return fmt.Errorf("%w: frame header: %w", errLZ4, err)
	}
	if binary.LittleEndian.Uint32(h[:]) != lz4Magic {
		return fmt.Errorf("%w: no frame magic", errLZ4)
	}
	flg, bd := h[4], h[5]
	if flg>>6 != 1 {
		return fmt.Errorf("%w: frame version %d", errLZ4, flg>>6)
	}
	z.blockSum = flg&0x10 != 0
	z.contSum = flg&0x04 != 0
	switch (bd >> 4) & 7 {
	case 4:
		z.blockMax = 64 << 10
	case 5:
		z.blockMax = 256 << 10
	case 6:
		z.blockMax = 1 << 20
	case 7:
		z.blockMax = 4 << 20
	default:
		return fmt.Errorf("%w: block size code %d", errLZ4, (bd>>4)&7)
	}
	skip := 1 // header checksum
	if flg&0x08 != 0 {
		skip += 8 // content size
	}
	if flg&0x01 != 0 {
		skip += 4 // dictionary id
	}
	if _, err := io.CopyN(io.Discard, z.r, int64(skip)); err != nil {
		return fmt.Errorf("%w: frame header: %w", errLZ4, err)
	}
	return nil
}

func (z *lz4Reader) Read(p []byte) (int, error) {
	for len(z.out) == 0 {
		if z.done {
			return 0, io.EOF
		}
		if !z.started {
			z.started = true
			if err := z.readHeader(); err != nil {
				return 0, err
			}
		}
		if err := z.nextBlock(); err != nil {
			return 0, err
		}
	}
	n := copy(p, z.out)
	z.out = z.out[n:]
	return n, nil
}

func (z *lz4Reader) nextBlock() error {
	var n [4]byte
	if _, err := io.ReadFull(z.r, n[:]); err != nil {
		return fmt.Errorf("%w: block size: %w", errLZ4, err)
	}
	size := binary.LittleEndian.Uint32(n[:])
	if size == 0 { // end mark
		z.done = true
		if z.contSum {
			_, _ = io.CopyN(io.Discard, z.r, 4)
		}
		return nil
	}
	raw := size&0x80000000 != 0
	size &^= 0x80000000
	if int(size) > z.blockMax {
		return fmt.Errorf("%w: block of %d bytes exceeds the frame's %d", errLZ4, size, z.blockMax)
	}
	if cap(z.in) < int(size) {
		z.in = make([]byte, size)
	}
	in := z.in[:size]
	if _, err := io.ReadFull(z.r, in); err != nil {
		return fmt.Errorf("%w: block: %w", errLZ4, err)
	}
	if z.blockSum {
		if _, err := io.CopyN(io.Discard, z.r, 4); err != nil {
			return fmt.Errorf("%w: block checksum: %w", errLZ4, err)
		}
	}
	if raw {
		z.out = in
		return nil
	}
	if cap(z.buf) < z.blockMax {
		z.buf = make([]byte, 0, z.blockMax)
	}
	out, err := lz4Block(z.buf[:0], in, z.blockMax)
	if err != nil {
		return err
	}
	z.buf, z.out = out, out
	return nil
}

// lz4Block decompresses one independent LZ4 block, appending at most limit
// bytes to dst.
func lz4Block(dst, src []byte, limit int) ([]byte, error) {
	errCorrupt := errors.Join(errLZ4, errors.New("corrupt block"))
	length := func(base int) (int, error) {
		n := base
		if base != 15 {
			return n, nil
		}
		for {
			if len(src) == 0 {
				return 0, errCorrupt
			}
			b := src[0]
			src = src[1:]
			n += int(b)
			if n > limit {
				return 0, errCorrupt
			}
			if b != 255 {
				return n, nil
			}
		}
	}
	for len(src) > 0 {
		token := src[0]
		src = src[1:]
		lit, err := length(int(token >> 4))
		if err != nil {
			return nil, err
		}
		if lit > len(src) || len(dst)+lit > limit {
			return nil, errCorrupt
		}
		dst = append(dst, src[:lit]...)
		src = src[lit:]
		if len(src) == 0 {
			return dst, nil // the last sequence has literals only
		}
		if len(src) < 2 {
			return nil, errCorrupt
		}
		off := int(binary.LittleEndian.Uint16(src))
		src = src[2:]
		ml, err := length(int(token & 15))
		if err != nil {
			return nil, err
		}
		ml += 4
		if off == 0 || off > len(dst) || len(dst)+ml > limit {
			return nil, errCorrupt
		}
		// Byte by byte: the match may overlap what it is copying.
		start := len(dst) - off
		for i := range ml {
			dst = append(dst, dst[start+i])
		}
	}
	return dst, nil
}
