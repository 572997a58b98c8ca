// Package bag writes and reads ROS bag files, format version 2.0
// (wiki.ros.org/Bags/Format/2.0), in pure Go.
//
// A bag is the line "#ROSBAG V2.0\n" followed by records. Every record is
//
//	header_len uint32 | header | data_len uint32 | data
//
// where the header is a list of "name=value" fields, each preceded by its
// uint32 length; all integers are little endian. The record kinds used here:
//
//	op 0x03 bag header:  index_pos, conn_count, chunk_count; padded with spaces
//	                     so header+data fill 4096 bytes, rewritten on close
//	op 0x05 chunk:       compression ("none", "bz2", "lz4"), size (uncompressed);
//	                     data is connection and message records, maybe compressed
//	op 0x07 connection:  conn, topic; data is a header with topic, type, md5sum,
//	                     message_definition (and callerid, latching from rosbag record)
//	op 0x02 message:     conn, time (uint32 sec, uint32 nsec); data is the
//	                     serialised message without its length prefix
//	op 0x04 index data:  ver=1, conn, count; data is count × (time, offset in chunk)
//	op 0x06 chunk info:  ver=1, chunk_pos, start_time, end_time, count; data is
//	                     count × (conn, message count)
//
// Layout: version line, bag header, then each chunk followed by its index
// data records, then (at index_pos) every connection record and every chunk
// info record.
package bag

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

const (
	magic            = "#ROSBAG V2.0\n"
	bagHeaderPadding = 4096 // header_len + data_len of the bag header record

	opMessageData = 0x02
	opBagHeader   = 0x03
	opIndexData   = 0x04
	opChunk       = 0x05
	opChunkInfo   = 0x06
	opConnection  = 0x07
)

// field is one name=value entry of a record header.
type field struct {
	name  string
	value []byte
}

func u8Field(name string, v uint8) field { return field{name, []byte{v}} }

func u32Field(name string, v uint32) field {
	return field{name, binary.LittleEndian.AppendUint32(nil, v)}
}

func u64Field(name string, v uint64) field {
	return field{name, binary.LittleEndian.AppendUint64(nil, v)}
}

func strField(name, v string) field { return field{name, []byte(v)} }

func timeField(name string, t rosTime) field { return field{name, t.bytes()} }

// encodeHeader serialises fields without the leading header_len.
func encodeHeader(fields ...field) []byte {
	var b []byte
	for _, f := range fields {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(f.name)+1+len(f.value)))
		b = append(b, f.name...)
		b = append(b, '=')
		b = append(b, f.value...)
	}
	return b
}

// appendRecord appends one complete record.
func appendRecord(b []byte, header, data []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(header)))
	b = append(b, header...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

// header is a parsed record header.
type header map[string][]byte

var (
	errFormat = errors.New("not a valid ROS bag 2.0 file")
	// errTruncated marks a record that runs past the end of the file, which
	// an unindexed bag (recorder killed) may legitimately end with.
	errTruncated = fmt.Errorf("%w: truncated record", errFormat)
)

func parseHeader(b []byte) (header, error) {
	h := header{}
	for len(b) > 0 {
		if len(b) < 4 {
			return nil, fmt.Errorf("%w: record header ends inside a field length", errFormat)
		}
		n := binary.LittleEndian.Uint32(b)
		b = b[4:]
		if uint64(n) > uint64(len(b)) {
			return nil, fmt.Errorf("%w: header field of %d bytes overruns its header (%d bytes left)", errFormat, n, len(b))
		}
		entry := b[:n]
		b = b[n:]
		eq := -1
		for i, c := range entry {
			if c == '=' {
				eq = i
				break
			}
		}
		if eq < 0 {
			return nil, fmt.Errorf("%w: header field %q has no '='", errFormat, truncate(entry))
		}
		h[string(entry[:eq])] = entry[eq+1:]
	}
	return h, nil
}

func truncate(b []byte) []byte { return b[:min(len(b), 32)] }

func (h header) op() (uint8, error) { return h.u8("op") }

func (h header) u8(name string) (uint8, error) {
	v, ok := h[name]
	if !ok || len(v) != 1 {
		return 0, fmt.Errorf("%w: record header field %q is missing or is not 1 byte", errFormat, name)
	}
	return v[0], nil
}

func (h header) u32(name string) (uint32, error) {
	v, ok := h[name]
	if !ok || len(v) != 4 {
		return 0, fmt.Errorf("%w: record header field %q is missing or is not 4 bytes", errFormat, name)
	}
	return binary.LittleEndian.Uint32(v), nil
}

func (h header) u64(name string) (uint64, error) {
	v, ok := h[name]
	if !ok || len(v) != 8 {
		return 0, fmt.Errorf("%w: record header field %q is missing or is not 8 bytes", errFormat, name)
	}
	return binary.LittleEndian.Uint64(v), nil
}

func (h header) time(name string) (rosTime, error) {
	v, ok := h[name]
	if !ok || len(v) != 8 {
		return rosTime{}, fmt.Errorf("%w: record header field %q is missing or is not 8 bytes", errFormat, name)
	}
	return rosTimeFrom(v), nil
}

func (h header) str(name string) (string, error) {
	v, ok := h[name]
	if !ok {
		return "", fmt.Errorf("%w: record header field %q is missing", errFormat, name)
	}
	return string(v), nil
}

// rosTime is ROS's time: unsigned seconds and nanoseconds since 1970.
type rosTime struct{ sec, nsec uint32 }

func rosTimeFrom(b []byte) rosTime {
	return rosTime{binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])}
}

func toRosTime(t time.Time) (rosTime, error) {
	s, ns := t.Unix(), t.Nanosecond()
	if s < 0 || s > math.MaxUint32 {
		return rosTime{}, fmt.Errorf("time %v is outside what a bag can store (1970 to 2106)", t)
	}
	return rosTime{uint32(s), uint32(ns)}, nil
}

func (t rosTime) bytes() []byte {
	b := binary.LittleEndian.AppendUint32(nil, t.sec)
	return binary.LittleEndian.AppendUint32(b, t.nsec)
}

func (t rosTime) Time() time.Time { return time.Unix(int64(t.sec), int64(t.nsec)).UTC() }

func (t rosTime) before(u rosTime) bool {
	return t.sec < u.sec || (t.sec == u.sec && t.nsec < u.nsec)
}

// readFull reads exactly n bytes. Large reads grow the buffer as bytes
// arrive, so a record length forged in a short or compressed input cannot
// make us allocate more than the input really holds.
func readFull(r io.Reader, n uint64) ([]byte, error) {
	const eager = 1 << 20
	if n <= eager {
		b := make([]byte, n)
		_, err := io.ReadFull(r, b)
		return b, err
	}
	b := make([]byte, 0, eager)
	for uint64(len(b)) < n {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		want := min(uint64(cap(b)), n)
		m, err := r.Read(b[len(b):want])
		b = b[:len(b)+m]
		if err != nil {
			if errors.Is(err, io.EOF) && uint64(len(b)) < n {
				return b, io.ErrUnexpectedEOF
			}
			if uint64(len(b)) == n {
				break
			}
			return b, err
		}
	}
	return b, nil
}
