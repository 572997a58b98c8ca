package cdr

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"
)

// headerSize is the encapsulation header in front of every payload.
const headerSize = 4

// Encapsulation identifiers (the header's first two bytes, big endian).
const (
	encCDRBE = 0x0000
	encCDRLE = 0x0001
)

// encoder appends one message to buf, which starts with the header; alignment
// is counted from the end of the header.
type encoder struct {
	buf []byte
}

func (e *encoder) align(n int) {
	for (len(e.buf)-headerSize)%n != 0 {
		e.buf = append(e.buf, 0)
	}
}

func (e *encoder) u8(v uint8) { e.buf = append(e.buf, v) }

func (e *encoder) u16(v uint16) {
	e.align(2)
	e.buf = binary.LittleEndian.AppendUint16(e.buf, v)
}

func (e *encoder) u32(v uint32) {
	e.align(4)
	e.buf = binary.LittleEndian.AppendUint32(e.buf, v)
}

func (e *encoder) u64(v uint64) {
	e.align(8)
	e.buf = binary.LittleEndian.AppendUint64(e.buf, v)
}

func (e *encoder) count(n int, what string) error {
	if uint64(n) > math.MaxUint32 {
		return fmt.Errorf("%s has %d elements, more than CDR can count", what, n)
	}
	e.u32(uint32(n))
	return nil
}

func (e *encoder) str(s string, bound int, what string) error {
	if bound > 0 && len(s) > bound {
		return fmt.Errorf("%s is %d bytes long, more than its bound of %d", what, len(s), bound)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%s holds a NUL byte, which a CDR string cannot carry", what)
	}
	if err := e.count(len(s)+1, what); err != nil {
		return err
	}
	e.buf = append(e.buf, s...)
	e.buf = append(e.buf, 0)
	return nil
}

func (e *encoder) value(b *binding, v reflect.Value, path string) error {
	if b.isTime {
		return e.time(v.Interface().(time.Time), path)
	}
	for _, f := range b.fields {
		fv := v.Field(f.index)
		p := path + "." + f.name
		switch f.cont {
		case single:
			if err := e.elem(f, fv, p); err != nil {
				return err
			}
		case array:
			if err := e.elems(f, fv, p); err != nil {
				return err
			}
		default:
			n := fv.Len()
			if f.cont == boundedSeq && n > f.length {
				return fmt.Errorf("%s has %d elements, more than its bound of %d", p, n, f.length)
			}
			if err := e.count(n, p); err != nil {
				return err
			}
			if n > 0 {
				if err := e.elems(f, fv, p); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// elems writes the elements of an array or slice.
func (e *encoder) elems(f boundField, v reflect.Value, path string) error {
	if f.base == tUint8 && v.Kind() == reflect.Slice {
		e.buf = append(e.buf, v.Bytes()...)
		return nil
	}
	for i := range v.Len() {
		if err := e.elem(f, v.Index(i), path); err != nil {
			return fmt.Errorf("element %d: %w", i, err)
		}
	}
	return nil
}

func (e *encoder) elem(f boundField, v reflect.Value, path string) error {
	switch f.base {
	case tNested:
		return e.value(f.elem, v, path)
	case tBool:
		b := uint8(0)
		if v.Bool() {
			b = 1
		}
		e.u8(b)
	case tInt8:
		e.u8(uint8(v.Int()))
	case tUint8, tChar:
		e.u8(uint8(v.Uint()))
	case tByte:
		if v.Kind() == reflect.Int8 {
			e.u8(uint8(v.Int()))
		} else {
			e.u8(uint8(v.Uint()))
		}
	case tInt16:
		e.u16(uint16(v.Int()))
	case tUint16:
		e.u16(uint16(v.Uint()))
	case tInt32:
		e.u32(uint32(v.Int()))
	case tUint32:
		e.u32(uint32(v.Uint()))
	case tInt64:
		e.u64(uint64(v.Int()))
	case tUint64:
		e.u64(v.Uint())
	case tFloat32:
		e.u32(math.Float32bits(float32(v.Float())))
	case tFloat64:
		e.u64(math.Float64bits(v.Float()))
	case tString:
		return e.str(v.String(), 0, path)
	case tBString:
		return e.str(v.String(), f.strCap, path)
	default:
		return fmt.Errorf("%s: unsupported field type %d", path, f.base)
	}
	return nil
}

// time writes builtin_interfaces/Time: seconds since 1970 (int32) and the
// nanoseconds within the second. The zero time.Time is written as 0, as
// goroslib does for ROS 1.
func (e *encoder) time(t time.Time, path string) error {
	var sec int64
	var nsec int64
	if !t.IsZero() {
		sec, nsec = t.Unix(), int64(t.Nanosecond())
	}
	if sec < math.MinInt32 || sec > math.MaxInt32 {
		return fmt.Errorf("%s: time %v is outside builtin_interfaces/Time's range (int32 seconds since 1970)", path, t)
	}
	e.u32(uint32(int32(sec)))
	e.u32(uint32(nsec))
	return nil
}

// decoder reads one message from data (the bytes after the header).
type decoder struct {
	data  []byte
	pos   int
	order binary.ByteOrder
}

// newDecoder reads the encapsulation header of data and returns a decoder
// of the payload after it.
func newDecoder(data []byte) (decoder, error) {
	if len(data) < headerSize {
		return decoder{}, fmt.Errorf("%d bytes, shorter than the 4-byte encapsulation header", len(data))
	}
	d := decoder{data: data[headerSize:]}
	switch enc := int(data[0])<<8 | int(data[1]); enc {
	case encCDRLE:
		d.order = binary.LittleEndian
	case encCDRBE:
		d.order = binary.BigEndian
	default:
		return decoder{}, fmt.Errorf("encapsulation %02x %02x is not plain CDR (want 00 01 or 00 00)", data[0], data[1])
	}
	return d, nil
}

// decodeError is a malformed-input error with the path of the field being read.
type decodeError struct {
	path string
	msg  string
}

func (e *decodeError) Error() string { return e.path + ": " + e.msg }

func (d *decoder) fail(path, format string, args ...any) error {
	return &decodeError{path: path, msg: fmt.Sprintf(format, args...)}
}

func (d *decoder) left() int { return len(d.data) - d.pos }

func (d *decoder) take(n int, path string) ([]byte, error) {
	if pad := (n - d.pos%n) % n; n > 1 && pad > 0 {
		if d.left() < pad {
			return nil, d.fail(path, "data ends at byte %d, inside alignment padding", d.pos+headerSize)
		}
		d.pos += pad
	}
	if d.left() < n {
		return nil, d.fail(path, "data ends at byte %d, %d bytes short of a %d-byte value", len(d.data)+headerSize, n-d.left(), n)
	}
	b := d.data[d.pos : d.pos+n]
	d.pos += n
	return b, nil
}

func (d *decoder) u8(path string) (uint8, error) {
	b, err := d.take(1, path)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

func (d *decoder) u16(path string) (uint16, error) {
	b, err := d.take(2, path)
	if err != nil {
		return 0, err
	}
	return d.order.Uint16(b), nil
}

func (d *decoder) u32(path string) (uint32, error) {
	b, err := d.take(4, path)
	if err != nil {
		return 0, err
	}
	return d.order.Uint32(b), nil
}

func (d *decoder) u64(path string) (uint64, error) {
	b, err := d.take(8, path)
	if err != nil {
		return 0, err
	}
	return d.order.Uint64(b), nil
}

// count reads a sequence length and checks that the remaining bytes can hold
// that many elements of at least minSize bytes, so that a forged count cannot
// make us allocate more than the input could describe.
func (d *decoder) count(minSize int, path string) (int, error) {
	n, err := d.u32(path)
	if err != nil {
		return 0, err
	}
	if uint64(n)*uint64(minSize) > uint64(d.left()) {
		return 0, d.fail(path, "sequence of %d elements does not fit in the %d bytes left", n, d.left())
	}
	return int(n), nil
}

func (d *decoder) str(bound int, path string) (string, error) {
	n, err := d.u32(path)
	if err != nil {
		return "", err
	}
	if uint64(n) > uint64(d.left()) {
		return "", d.fail(path, "string of %d bytes runs past the end (%d bytes left)", n, d.left())
	}
	if n == 0 {
		// Some writers send an empty string without its NUL.
		return "", nil
	}
	b := d.data[d.pos : d.pos+int(n)]
	if b[n-1] != 0 {
		return "", d.fail(path, "string of %d bytes does not end with a NUL", n)
	}
	if i := bytes.IndexByte(b[:n-1], 0); i >= 0 {
		return "", d.fail(path, "string holds a NUL at byte %d of %d", i, n-1)
	}
	if bound > 0 && int(n)-1 > bound {
		return "", d.fail(path, "string of %d bytes exceeds its bound of %d", n-1, bound)
	}
	d.pos += int(n)
	return string(b[:n-1]), nil
}

func (d *decoder) value(b *binding, v reflect.Value, path string) error {
	if b.isTime {
		return d.time(v, path)
	}
	for _, f := range b.fields {
		fv := v.Field(f.index)
		p := path + "." + f.name
		switch f.cont {
		case single:
			if err := d.elem(f, fv, p); err != nil {
				return err
			}
		case array:
			if err := d.elems(f, fv, fv.Len(), p); err != nil {
				return err
			}
		default:
			minSize := f.base.wireSize()
			switch {
			case f.elem != nil:
				minSize = f.elem.minSize
			case f.base == tString || f.base == tBString:
				minSize = 4
			}
			n, err := d.count(minSize, p)
			if err != nil {
				return err
			}
			if f.cont == boundedSeq && n > f.length {
				return d.fail(p, "sequence of %d elements exceeds its bound of %d", n, f.length)
			}
			if n == 0 {
				fv.Set(reflect.Zero(fv.Type()))
				continue
			}
			if f.base == tUint8 {
				b := make([]byte, n)
				copy(b, d.data[d.pos:])
				d.pos += n
				fv.SetBytes(b)
				continue
			}
			fv.Set(reflect.MakeSlice(fv.Type(), n, n))
			if err := d.elems(f, fv, n, p); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *decoder) elems(f boundField, v reflect.Value, n int, path string) error {
	for i := range n {
		if err := d.elem(f, v.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
	}
	return nil
}

func (d *decoder) elem(f boundField, v reflect.Value, path string) error {
	switch f.base {
	case tNested:
		return d.value(f.elem, v, path)
	case tBool:
		b, err := d.u8(path)
		if err != nil {
			return err
		}
		if b > 1 {
			return d.fail(path, "bool is %d, not 0 or 1", b)
		}
		v.SetBool(b == 1)
	case tInt8, tUint8, tChar, tByte:
		b, err := d.u8(path)
		if err != nil {
			return err
		}
		if v.Kind() == reflect.Int8 {
			v.SetInt(int64(int8(b)))
		} else {
			v.SetUint(uint64(b))
		}
	case tInt16, tUint16:
		x, err := d.u16(path)
		if err != nil {
			return err
		}
		if f.base == tInt16 {
			v.SetInt(int64(int16(x)))
		} else {
			v.SetUint(uint64(x))
		}
	case tInt32, tUint32, tFloat32:
		x, err := d.u32(path)
		if err != nil {
			return err
		}
		switch f.base {
		case tInt32:
			v.SetInt(int64(int32(x)))
		case tUint32:
			v.SetUint(uint64(x))
		default:
			v.SetFloat(float64(math.Float32frombits(x)))
		}
	case tInt64, tUint64, tFloat64:
		x, err := d.u64(path)
		if err != nil {
			return err
		}
		switch f.base {
		case tInt64:
			v.SetInt(int64(x))
		case tUint64:
			v.SetUint(x)
		default:
			v.SetFloat(math.Float64frombits(x))
		}
	case tString, tBString:
		bound := 0
		if f.base == tBString {
			bound = f.strCap
		}
		s, err := d.str(bound, path)
		if err != nil {
			return err
		}
		v.SetString(s)
	default:
		return d.fail(path, "unsupported field type %d", f.base)
	}
	return nil
}

func (d *decoder) time(v reflect.Value, path string) error {
	sec, err := d.u32(path + ".sec")
	if err != nil {
		return err
	}
	nsec, err := d.u32(path + ".nanosec")
	if err != nil {
		return err
	}
	if nsec >= 1e9 {
		return d.fail(path+".nanosec", "nanosec is %d, not below 1e9", nsec)
	}
	v.Set(reflect.ValueOf(time.Unix(int64(int32(sec)), int64(nsec))))
	return nil
}
