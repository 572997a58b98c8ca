package cdr

import (
	"fmt"
	"reflect"
	"strings"
	"time"
)

// binding ties a type description to the Go struct that holds its values:
// field i of the description is Go field index[i], found by name
// (frame_id → FrameId), so goroslib's ROS 1 structs and this package's own
// types are read without per-type code. Go fields that the ROS 2 type lacks
// (Header.Seq) are left out.
type binding struct {
	desc    *typeDesc
	goType  reflect.Type
	isTime  bool // builtin_interfaces/Time held in a time.Time
	fields  []boundField
	minSize int // fewest wire bytes one value can take (≥ 1)
}

type boundField struct {
	field
	index int      // Go struct field index
	elem  *binding // for nested fields
}

var timeType = reflect.TypeOf(time.Time{})

// goName is the Go field name goroslib derives from a ROS field name.
func goName(rosName string) string {
	var b strings.Builder
	for _, part := range strings.Split(rosName, "_") {
		if part == "" {
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

// bind builds the binding of desc onto goType, checking that every field
// exists with a fitting Go type. cache holds bindings made so far.
func bind(desc *typeDesc, goType reflect.Type, cat *catalog, cache map[reflect.Type]*binding) (*binding, error) {
	if b, ok := cache[goType]; ok {
		if b.desc != desc {
			return nil, fmt.Errorf("Go type %v is bound to %s, not %s", goType, b.desc.name, desc.name)
		}
		return b, nil
	}
	b := &binding{desc: desc, goType: goType}
	cache[goType] = b
	if goType == timeType {
		b.isTime, b.minSize = true, 8
		return b, nil
	}
	if goType.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%s: Go type %v is not a struct", desc.name, goType)
	}
	for _, f := range desc.fields {
		sf, ok := goType.FieldByName(goName(f.name))
		if !ok || len(sf.Index) != 1 {
			return nil, fmt.Errorf("%s: Go type %v has no field %s for %q", desc.name, goType, goName(f.name), f.name)
		}
		bf := boundField{field: f, index: sf.Index[0]}
		t := sf.Type
		switch f.cont {
		case array:
			if t.Kind() != reflect.Array || t.Len() != f.length {
				return nil, fmt.Errorf("%s.%s: Go type %v is not an array of %d", desc.name, f.name, t, f.length)
			}
			t = t.Elem()
		case sequence, boundedSeq:
			if t.Kind() != reflect.Slice {
				return nil, fmt.Errorf("%s.%s: Go type %v is not a slice", desc.name, f.name, t)
			}
			t = t.Elem()
		}
		elemMin := f.base.wireSize()
		if f.base == tNested {
			if cat.byGo[t] != f.nested {
				return nil, fmt.Errorf("%s.%s: Go type %v does not hold %s", desc.name, f.name, t, f.nested.name)
			}
			eb, err := bind(f.nested, t, cat, cache)
			if err != nil {
				return nil, err
			}
			bf.elem = eb
			elemMin = eb.minSize
		} else if !kindFits(f.base, t.Kind()) {
			return nil, fmt.Errorf("%s.%s: Go type %v cannot hold a %s", desc.name, f.name, t, f.base.msgName())
		}
		switch {
		case f.base == tString || f.base == tBString:
			elemMin = 4
		case elemMin == 0:
			elemMin = 1
		}
		switch f.cont {
		case single:
			b.minSize += elemMin
		case array:
			b.minSize += f.length * elemMin
		default:
			b.minSize += 4
		}
		b.fields = append(b.fields, bf)
	}
	b.minSize = max(b.minSize, 1)
	return b, nil
}

func kindFits(b base, k reflect.Kind) bool {
	switch b {
	case tBool:
		return k == reflect.Bool
	case tInt8:
		return k == reflect.Int8
	case tUint8, tChar:
		return k == reflect.Uint8
	case tByte:
		// ROS 1's byte is int8, ROS 2's is an unsigned octet: one byte either way.
		return k == reflect.Uint8 || k == reflect.Int8
	case tInt16:
		return k == reflect.Int16
	case tUint16:
		return k == reflect.Uint16
	case tInt32:
		return k == reflect.Int32
	case tUint32:
		return k == reflect.Uint32
	case tInt64:
		return k == reflect.Int64
	case tUint64:
		return k == reflect.Uint64
	case tFloat32:
		return k == reflect.Float32
	case tFloat64:
		return k == reflect.Float64
	case tString, tBString:
		return k == reflect.String
	}
	return false
}
