package cdr

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// base is the element type of a field. The values are the FIELD_TYPE_* ids
// of type_description_interfaces/msg/FieldType, which REP 2011 hashes.
type base int

const (
	tNested  base = 1
	tInt8    base = 2
	tUint8   base = 3
	tInt16   base = 4
	tUint16  base = 5
	tInt32   base = 6
	tUint32  base = 7
	tInt64   base = 8
	tUint64  base = 9
	tFloat32 base = 10
	tFloat64 base = 11
	tChar    base = 13
	tBool    base = 15
	tByte    base = 16
	tString  base = 17
	tBString base = 21 // bounded string, string<=N
)

// container says whether a field holds one value, a fixed array, or a
// sequence. Its value is what FieldType adds to the element's id.
type container int

const (
	single     container = 0
	array      container = 48  // T[N]
	boundedSeq container = 96  // T[<=N]
	sequence   container = 144 // T[]
)

// field is one member of a message type.
type field struct {
	name   string
	base   base
	nested *typeDesc // for tNested
	cont   container
	length int // N of T[N] and T[<=N]
	strCap int // N of string<=N
}

// constant is a constant of a .msg definition: part of the schema text, not
// of the wire format nor of the type hash.
type constant struct {
	typ, name, value string
}

// typeDesc describes one ROS 2 message type.
type typeDesc struct {
	name   string // "geometry_msgs/msg/PoseStamped"
	fields []field
	consts []constant
}

// wireSize is the size of one element of a primitive base type, 0 for strings
// and nested types.
func (b base) wireSize() int {
	switch b {
	case tInt8, tUint8, tChar, tBool, tByte:
		return 1
	case tInt16, tUint16:
		return 2
	case tInt32, tUint32, tFloat32:
		return 4
	case tInt64, tUint64, tFloat64:
		return 8
	}
	return 0
}

// msgName spells a base type as a .msg file does.
func (b base) msgName() string {
	switch b {
	case tInt8:
		return "int8"
	case tUint8:
		return "uint8"
	case tInt16:
		return "int16"
	case tUint16:
		return "uint16"
	case tInt32:
		return "int32"
	case tUint32:
		return "uint32"
	case tInt64:
		return "int64"
	case tUint64:
		return "uint64"
	case tFloat32:
		return "float32"
	case tFloat64:
		return "float64"
	case tChar:
		return "char"
	case tBool:
		return "bool"
	case tByte:
		return "byte"
	case tString:
		return "string"
	}
	return fmt.Sprintf("type%d", int(b))
}

// references lists every type t refers to, directly or not, sorted by name
// as REP 2011 orders referenced_type_descriptions.
func (t *typeDesc) references() []*typeDesc {
	seen := map[string]*typeDesc{}
	var walk func(*typeDesc)
	walk = func(d *typeDesc) {
		for _, f := range d.fields {
			if f.nested != nil && seen[f.nested.name] == nil {
				seen[f.nested.name] = f.nested
				walk(f.nested)
			}
		}
	}
	walk(t)
	refs := make([]*typeDesc, 0, len(seen))
	for _, d := range seen {
		refs = append(refs, d)
	}
	slices.SortFunc(refs, func(a, b *typeDesc) int { return strings.Compare(a.name, b.name) })
	return refs
}

// hash is the REP 2011 type hash, "RIHS01_" and the hex SHA-256 of the
// type description in rosidl's canonical JSON: the type and its sorted
// referenced types, fields as {name, type{type_id, capacity, string_capacity,
// nested_type_name}} without default values, separators ", " and ": ",
// ASCII only (rosidl_generator_type_description's calculate_type_hash).
func (t *typeDesc) hash() string {
	var b strings.Builder
	b.WriteString(`{"type_description": `)
	t.writeJSON(&b)
	b.WriteString(`, "referenced_type_descriptions": [`)
	for i, r := range t.references() {
		if i > 0 {
			b.WriteString(", ")
		}
		r.writeJSON(&b)
	}
	b.WriteString("]}")
	sum := sha256.Sum256([]byte(b.String()))
	return "RIHS01_" + hex.EncodeToString(sum[:])
}

func (t *typeDesc) writeJSON(b *strings.Builder) {
	b.WriteString(`{"type_name": `)
	writeJSONString(b, t.name)
	b.WriteString(`, "fields": [`)
	for i, f := range t.fields {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(`{"name": `)
		writeJSONString(b, f.name)
		capacity := 0
		if f.cont == array || f.cont == boundedSeq {
			// The size of T[N], the bound of T[<=N].
			capacity = f.length
		}
		id := f.base
		if id == tChar {
			// rosidl reads a .msg char as uint8.
			id = tUint8
		}
		nested := ""
		if f.nested != nil {
			nested = f.nested.name
		}
		fmt.Fprintf(b, `, "type": {"type_id": %d, "capacity": %d, "string_capacity": %d, "nested_type_name": `,
			int(id)+int(f.cont), capacity, f.strCap)
		writeJSONString(b, nested)
		b.WriteString("}}")
	}
	b.WriteString("]}")
}

// writeJSONString quotes s as Python's json.dumps(ensure_ascii=True) does.
func writeJSONString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20 || (r >= 0x7f && r < 0x10000):
			fmt.Fprintf(b, `\u%04x`, r)
		case r >= 0x10000:
			r -= 0x10000
			fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}

// shortName is "pkg/Type" for "pkg/msg/Type", the spelling of a nested type
// inside a .msg file and after "MSG:" in a schema.
func shortName(full string) string {
	parts := strings.Split(full, "/")
	if len(parts) == 3 {
		return parts[0] + "/" + parts[2]
	}
	return full
}

// msgText is the type's .msg definition: constants, then one line per field.
func (t *typeDesc) msgText() string {
	var b strings.Builder
	for _, c := range t.consts {
		fmt.Fprintf(&b, "%s %s=%s\n", c.typ, c.name, c.value)
	}
	for _, f := range t.fields {
		switch {
		case f.nested != nil:
			b.WriteString(shortName(f.nested.name))
		case f.base == tBString:
			fmt.Fprintf(&b, "string<=%d", f.strCap)
		default:
			b.WriteString(f.base.msgName())
		}
		switch f.cont {
		case array:
			fmt.Fprintf(&b, "[%d]", f.length)
		case boundedSeq:
			fmt.Fprintf(&b, "[<=%d]", f.length)
		case sequence:
			b.WriteString("[]")
		}
		fmt.Fprintf(&b, " %s\n", f.name)
	}
	return b.String()
}

// schema is the ros2msg text rosbag2 stores in MCAP: the type's definition,
// then each referenced type after a line of 80 '=' and "MSG: pkg/Type".
func (t *typeDesc) schema() string {
	var b strings.Builder
	b.WriteString(t.msgText())
	for _, r := range t.references() {
		b.WriteString(strings.Repeat("=", 80))
		fmt.Fprintf(&b, "\nMSG: %s\n", shortName(r.name))
		b.WriteString(r.msgText())
	}
	return b.String()
}

// ddsName is the DDS type name rosidl_generator_dds_idl gives the type:
// "pkg::msg::dds_::Type_".
func (t *typeDesc) ddsName() string {
	parts := strings.Split(t.name, "/")
	if len(parts) != 3 {
		return t.name
	}
	return parts[0] + "::" + parts[1] + "::dds_::" + parts[2] + "_"
}
