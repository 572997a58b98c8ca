package weights

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// A minimal unpickler for what torch.save writes: it builds plain values and
// never calls anything. Globals are data (pyGlobal); REDUCE on the few torch
// rebuild functions we know produces tensor references, and on anything else
// an opaque pyObject, so that unrelated entries of a wrapper dict (epochs,
// optimizer state, argparse namespaces) do not stop the load.

type pyGlobal struct{ module, name string }

func (g pyGlobal) String() string { return g.module + "." + g.name }

type pyTuple []any

type pyList struct{ items []any }

// pyDict keeps insertion order; only string keys can be looked up.
type pyDict struct {
	keys []any
	vals []any
}

func (d *pyDict) set(k, v any) {
	if s, ok := k.(string); ok {
		for i, kk := range d.keys {
			if ks, ok := kk.(string); ok && ks == s {
				d.vals[i] = v
				return
			}
		}
	}
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
}

func (d *pyDict) get(k string) (any, bool) {
	for i, kk := range d.keys {
		if ks, ok := kk.(string); ok && ks == k {
			return d.vals[i], true
		}
	}
	return nil, false
}

// pyObject is the result of calling something we do not model.
type pyObject struct {
	class pyGlobal
	args  any
	state any
}

// storageRef is a persistent id naming one storage file of the archive.
type storageRef struct {
	dtype string // safetensors dtype name
	key   string // archive/data/<key>
	numel int64
}

// tensorRef is a rebuilt tensor: a strided view of a storage.
type tensorRef struct {
	storage *storageRef
	offset  int64
	shape   []int64
	stride  []int64
}

// storageDTypes maps torch storage classes to safetensors dtype names.
var storageDTypes = map[string]string{
	"FloatStorage": "F32", "DoubleStorage": "F64", "HalfStorage": "F16", "BFloat16Storage": "BF16",
	"LongStorage": "I64", "IntStorage": "I32", "ShortStorage": "I16", "CharStorage": "I8",
	"ByteStorage": "U8", "BoolStorage": "BOOL",
}

const (
	maxPickleStack = 1 << 20
	maxPickleMemo  = 1 << 22
)

type unpickler struct {
	b     []byte
	pos   int
	stack []any
	marks []int
	memo  map[uint64]any
}

var errPickleTruncated = errors.New("pickle ends in the middle of an instruction")

// unpickle runs the pickle program in b and returns the object it builds.
func unpickle(b []byte) (any, error) {
	u := &unpickler{b: b, memo: map[uint64]any{}}
	v, err := u.run()
	if err != nil {
		return nil, fmt.Errorf("pickle: at byte %d: %w", u.pos, err)
	}
	return v, nil
}

func (u *unpickler) read(n int) ([]byte, error) {
	if n < 0 || n > len(u.b)-u.pos {
		return nil, errPickleTruncated
	}
	s := u.b[u.pos : u.pos+n]
	u.pos += n
	return s, nil
}

func (u *unpickler) readUint(n int) (uint64, error) {
	s, err := u.read(n)
	if err != nil {
		return 0, err
	}
	var v uint64
	for i := n - 1; i >= 0; i-- {
		v = v<<8 | uint64(s[i])
	}
	return v, nil
}

// readLine reads a newline-terminated argument of the text opcodes.
func (u *unpickler) readLine() (string, error) {
	i := bytes.IndexByte(u.b[u.pos:], '\n')
	if i < 0 {
		return "", errPickleTruncated
	}
	s := string(u.b[u.pos : u.pos+i])
	u.pos += i + 1
	return s, nil
}

func (u *unpickler) push(v any) error {
	if len(u.stack) >= maxPickleStack {
		return errors.New("stack too deep")
	}
	u.stack = append(u.stack, v)
	return nil
}

// floor is the stack height below which the current MARK hides values (as
// in Python, where MARK starts a fresh stack).
func (u *unpickler) floor() int {
	if len(u.marks) == 0 {
		return 0
	}
	return u.marks[len(u.marks)-1]
}

func (u *unpickler) pop() (any, error) {
	if len(u.stack) <= u.floor() {
		return nil, errors.New("stack underflow")
	}
	v := u.stack[len(u.stack)-1]
	u.stack = u.stack[:len(u.stack)-1]
	return v, nil
}

// popN pops the top n values, returned in stack order (deepest first).
func (u *unpickler) popN(n int) ([]any, error) {
	if len(u.stack)-n < u.floor() {
		return nil, errors.New("stack underflow")
	}
	vs := append([]any(nil), u.stack[len(u.stack)-n:]...)
	u.stack = u.stack[:len(u.stack)-n]
	return vs, nil
}

func (u *unpickler) top() (any, error) {
	if len(u.stack) <= u.floor() {
		return nil, errors.New("stack underflow")
	}
	return u.stack[len(u.stack)-1], nil
}

// popMark pops everything above the last MARK.
func (u *unpickler) popMark() ([]any, error) {
	if len(u.marks) == 0 {
		return nil, errors.New("no mark on the stack")
	}
	m := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	if m > len(u.stack) {
		return nil, errors.New("mark beyond the stack")
	}
	items := append([]any(nil), u.stack[m:]...)
	u.stack = u.stack[:m]
	return items, nil
}

// memoIndex reads the memo index of a PUT or GET opcode: a decimal line for
// the text forms (p, g), one byte for BINPUT/BINGET (q, h), four for the
// LONG_ forms (r, j).
func (u *unpickler) memoIndex(op byte) (uint64, error) {
	switch op {
	case 'q', 'h':
		return u.readUint(1)
	case 'r', 'j':
		return u.readUint(4)
	}
	line, err := u.readLine()
	if err != nil {
		return 0, err
	}
	idx, err := strconv.ParseUint(line, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("bad memo index %q", line)
	}
	return idx, nil
}

func (u *unpickler) memoPut(idx uint64) error {
	v, err := u.top()
	if err != nil {
		return err
	}
	if _, ok := u.memo[idx]; !ok && len(u.memo) >= maxPickleMemo {
		return errors.New("memo too large")
	}
	u.memo[idx] = v
	return nil
}

func (u *unpickler) memoGet(idx uint64) error {
	v, ok := u.memo[idx]
	if !ok {
		return fmt.Errorf("memo entry %d was never stored", idx)
	}
	return u.push(v)
}

func (u *unpickler) run() (any, error) {
	for {
		if u.pos >= len(u.b) {
			return nil, errors.New("pickle ends without STOP")
		}
		op := u.b[u.pos]
		u.pos++
		if err := u.step(op); err != nil {
			if err == errStop {
				v, err := u.pop()
				if err != nil {
					return nil, err
				}
				return v, nil
			}
			return nil, fmt.Errorf("opcode 0x%02x: %w", op, err)
		}
	}
}

var errStop = errors.New("stop")

func (u *unpickler) step(op byte) error {
	switch op {
	case 0x80: // PROTO
		v, err := u.readUint(1)
		if err != nil {
			return err
		}
		if v > 5 {
			return fmt.Errorf("pickle protocol %d is not supported", v)
		}
	case 0x95: // FRAME: a length hint only
		_, err := u.readUint(8)
		return err
	case '.': // STOP
		return errStop
	case '(': // MARK
		u.marks = append(u.marks, len(u.stack))
		if len(u.marks) > maxPickleStack {
			return errors.New("too many marks")
		}
	case '0': // POP
		if len(u.marks) > 0 && u.floor() == len(u.stack) { // POP of an empty frame drops the MARK
			u.marks = u.marks[:len(u.marks)-1]
			return nil
		}
		_, err := u.pop()
		return err
	case '1': // POP_MARK
		_, err := u.popMark()
		return err
	case '2': // DUP
		v, err := u.top()
		if err != nil {
			return err
		}
		return u.push(v)
	case 'N':
		return u.push(nil)
	case 0x88: // NEWTRUE
		return u.push(true)
	case 0x89: // NEWFALSE
		return u.push(false)
	case 'J': // BININT
		v, err := u.readUint(4)
		if err != nil {
			return err
		}
		return u.push(int64(int32(uint32(v))))
	case 'K': // BININT1
		v, err := u.readUint(1)
		if err != nil {
			return err
		}
		return u.push(int64(v))
	case 'M': // BININT2
		v, err := u.readUint(2)
		if err != nil {
			return err
		}
		return u.push(int64(v))
	case 0x8a, 0x8b: // LONG1, LONG4
		w := 1
		if op == 0x8b {
			w = 4
		}
		n, err := u.readUint(w)
		if err != nil {
			return err
		}
		if n > 256 { // torch writes at most 8-byte longs
			return fmt.Errorf("integer of %d bytes is too long", n)
		}
		s, err := u.read(int(n))
		if err != nil {
			return err
		}
		return u.push(decodeLong(s))
	case 'I', 'L': // INT, LONG (text)
		line, err := u.readLine()
		if err != nil {
			return err
		}
		line = strings.TrimSuffix(line, "L")
		switch line {
		case "00":
			return u.push(false)
		case "01":
			return u.push(true)
		}
		v, err := strconv.ParseInt(line, 10, 64)
		if err != nil {
			return fmt.Errorf("bad integer %q", line)
		}
		return u.push(v)
	case 'G': // BINFLOAT (big-endian)
		s, err := u.read(8)
		if err != nil {
			return err
		}
		return u.push(math.Float64frombits(binary.BigEndian.Uint64(s)))
	case 'F': // FLOAT (text)
		line, err := u.readLine()
		if err != nil {
			return err
		}
		v, err := strconv.ParseFloat(line, 64)
		if err != nil {
			return fmt.Errorf("bad float %q", line)
		}
		return u.push(v)
	case 'X', 0x8c, 0x8d, 'T', 'U', 'B', 'C', 0x8e: // unicode / string / bytes with a length prefix
		w := map[byte]int{'X': 4, 0x8c: 1, 0x8d: 8, 'T': 4, 'U': 1, 'B': 4, 'C': 1, 0x8e: 8}[op]
		n, err := u.readUint(w)
		if err != nil {
			return err
		}
		if n > uint64(len(u.b)-u.pos) {
			return errPickleTruncated
		}
		s, err := u.read(int(n))
		if err != nil {
			return err
		}
		if op == 'B' || op == 'C' || op == 0x8e {
			return u.push(append([]byte(nil), s...))
		}
		return u.push(string(s))
	case 'V', 'S': // UNICODE, STRING (text): kept verbatim, torch never writes them
		line, err := u.readLine()
		if err != nil {
			return err
		}
		if op == 'S' {
			if uq, err := strconv.Unquote(line); err == nil {
				line = uq
			} else if len(line) >= 2 && line[0] == '\'' && line[len(line)-1] == '\'' {
				line = line[1 : len(line)-1]
			}
		}
		return u.push(line)
	case ')':
		return u.push(pyTuple{})
	case 't':
		items, err := u.popMark()
		if err != nil {
			return err
		}
		return u.push(pyTuple(items))
	case 0x85, 0x86, 0x87: // TUPLE1..3
		n := int(op-0x85) + 1
		items := make(pyTuple, n)
		for i := n - 1; i >= 0; i-- {
			v, err := u.pop()
			if err != nil {
				return err
			}
			items[i] = v
		}
		return u.push(items)
	case ']':
		return u.push(&pyList{})
	case 'l':
		items, err := u.popMark()
		if err != nil {
			return err
		}
		return u.push(&pyList{items: items})
	case 'a': // APPEND
		v, err := u.pop()
		if err != nil {
			return err
		}
		return u.appendTo([]any{v})
	case 'e': // APPENDS
		items, err := u.popMark()
		if err != nil {
			return err
		}
		return u.appendTo(items)
	case '}':
		return u.push(&pyDict{})
	case 'd':
		items, err := u.popMark()
		if err != nil {
			return err
		}
		d := &pyDict{}
		if err := setItems(d, items); err != nil {
			return err
		}
		return u.push(d)
	case 's': // SETITEM
		kv, err := u.popN(2)
		if err != nil {
			return err
		}
		return u.setItemsOnTop(kv)
	case 'u': // SETITEMS
		items, err := u.popMark()
		if err != nil {
			return err
		}
		return u.setItemsOnTop(items)
	case 0x8f: // EMPTY_SET
		return u.push(&pyList{})
	case 0x90: // ADDITEMS
		items, err := u.popMark()
		if err != nil {
			return err
		}
		return u.appendTo(items)
	case 0x91: // FROZENSET
		items, err := u.popMark()
		if err != nil {
			return err
		}
		return u.push(&pyList{items: items})
	case 'p', 'q', 'r': // PUT, BINPUT, LONG_BINPUT
		idx, err := u.memoIndex(op)
		if err != nil {
			return err
		}
		return u.memoPut(idx)
	case 0x94: // MEMOIZE
		return u.memoPut(uint64(len(u.memo)))
	case 'g', 'h', 'j': // GET, BINGET, LONG_BINGET
		idx, err := u.memoIndex(op)
		if err != nil {
			return err
		}
		return u.memoGet(idx)
	case 'c': // GLOBAL
		mod, err := u.readLine()
		if err != nil {
			return err
		}
		name, err := u.readLine()
		if err != nil {
			return err
		}
		return u.push(pyGlobal{mod, name})
	case 0x93: // STACK_GLOBAL
		mn, err := u.popN(2)
		if err != nil {
			return err
		}
		ms, ok1 := mn[0].(string)
		ns, ok2 := mn[1].(string)
		if !ok1 || !ok2 {
			return errors.New("STACK_GLOBAL needs two strings")
		}
		return u.push(pyGlobal{ms, ns})
	case 'R': // REDUCE
		fa, err := u.popN(2)
		if err != nil {
			return err
		}
		t, ok := fa[1].(pyTuple)
		if !ok {
			return errors.New("REDUCE arguments are not a tuple")
		}
		v, err := call(fa[0], t)
		if err != nil {
			return err
		}
		return u.push(v)
	case 0x81: // NEWOBJ: cls, args
		ca, err := u.popN(2)
		if err != nil {
			return err
		}
		g, _ := ca[0].(pyGlobal)
		return u.push(&pyObject{class: g, args: ca[1]})
	case 0x92: // NEWOBJ_EX: cls, args, kwargs
		cak, err := u.popN(3)
		if err != nil {
			return err
		}
		g, _ := cak[0].(pyGlobal)
		return u.push(&pyObject{class: g, args: pyTuple{cak[1], cak[2]}})
	case 'b': // BUILD
		state, err := u.pop()
		if err != nil {
			return err
		}
		obj, err := u.top()
		if err != nil {
			return err
		}
		// OrderedDict state (torch's _metadata attribute) carries nothing we need.
		if o, ok := obj.(*pyObject); ok {
			o.state = state
		}
	case 'Q': // BINPERSID
		pid, err := u.pop()
		if err != nil {
			return err
		}
		v, err := persistentLoad(pid)
		if err != nil {
			return err
		}
		return u.push(v)
	case 'P': // PERSID (text): not used by torch
		return errors.New("text persistent ids are not supported")
	default:
		return fmt.Errorf("unsupported pickle opcode 0x%02x", op)
	}
	return nil
}

func (u *unpickler) appendTo(items []any) error {
	top, err := u.top()
	if err != nil {
		return err
	}
	l, ok := top.(*pyList)
	if !ok {
		return fmt.Errorf("cannot append to a %T", top)
	}
	l.items = append(l.items, items...)
	return nil
}

func (u *unpickler) setItemsOnTop(items []any) error {
	top, err := u.top()
	if err != nil {
		return err
	}
	d, ok := top.(*pyDict)
	if !ok {
		if _, opaque := top.(*pyObject); opaque {
			return nil // items of an object we do not model
		}
		return fmt.Errorf("cannot set items on a %T", top)
	}
	return setItems(d, items)
}

func setItems(d *pyDict, items []any) error {
	if len(items)%2 != 0 {
		return errors.New("odd number of dict items")
	}
	for i := 0; i < len(items); i += 2 {
		d.set(items[i], items[i+1])
	}
	return nil
}

// decodeLong decodes a little-endian two's-complement integer; values beyond
// int64 come back as *big.Int.
func decodeLong(s []byte) any {
	if len(s) == 0 {
		return int64(0)
	}
	if len(s) <= 8 {
		var v uint64
		for i := len(s) - 1; i >= 0; i-- {
			v = v<<8 | uint64(s[i])
		}
		if s[len(s)-1]&0x80 != 0 && len(s) < 8 {
			v |= ^uint64(0) << (8 * len(s))
		}
		return int64(v)
	}
	be := make([]byte, len(s))
	for i := range s {
		be[len(s)-1-i] = s[i]
	}
	v := new(big.Int).SetBytes(be)
	if s[len(s)-1]&0x80 != 0 {
		v.Sub(v, new(big.Int).Lsh(big.NewInt(1), uint(8*len(s))))
	}
	return v
}

// persistentLoad resolves torch's ('storage', StorageClass, key, location, numel).
func persistentLoad(pid any) (any, error) {
	t, ok := pid.(pyTuple)
	if !ok || len(t) != 5 {
		return nil, fmt.Errorf("persistent id is not a 5-tuple: %v", describe(pid))
	}
	if s, _ := t[0].(string); s != "storage" {
		return nil, fmt.Errorf("persistent id of kind %v, want \"storage\"", describe(t[0]))
	}
	g, ok := t[1].(pyGlobal)
	if !ok {
		return nil, fmt.Errorf("storage type is %s, not a class", describe(t[1]))
	}
	dt, ok := storageDTypes[g.name]
	if !ok || (g.module != "torch" && g.module != "torch.cuda") {
		return nil, fmt.Errorf("unsupported storage type %s", g)
	}
	key, ok := t[2].(string)
	if !ok {
		return nil, fmt.Errorf("storage key is %s, not a string", describe(t[2]))
	}
	n, ok := t[4].(int64)
	if !ok || n < 0 {
		return nil, fmt.Errorf("storage size is %s, not a count", describe(t[4]))
	}
	return &storageRef{dtype: dt, key: key, numel: n}, nil
}

// call applies the callables torch.save state dicts use.
func call(fn any, args pyTuple) (any, error) {
	g, ok := fn.(pyGlobal)
	if !ok {
		return &pyObject{args: args}, nil
	}
	switch g.String() {
	case "collections.OrderedDict", "builtins.dict", "__builtin__.dict":
		if len(args) != 0 {
			return &pyObject{class: g, args: args}, nil
		}
		return &pyDict{}, nil
	case "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor":
		return rebuildTensor(args)
	case "torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state":
		if len(args) < 1 {
			return nil, fmt.Errorf("%s without arguments", g)
		}
		if _, ok := args[0].(*tensorRef); !ok {
			return nil, fmt.Errorf("%s of a %s, not a tensor", g, describe(args[0]))
		}
		return args[0], nil
	}
	return &pyObject{class: g, args: args}, nil
}

// rebuildTensor reads (storage, storage_offset, size, stride, ...).
func rebuildTensor(args pyTuple) (any, error) {
	if len(args) < 4 {
		return nil, fmt.Errorf("_rebuild_tensor with %d arguments, want at least 4", len(args))
	}
	st, ok := args[0].(*storageRef)
	if !ok {
		return nil, fmt.Errorf("tensor storage is %s, not a storage", describe(args[0]))
	}
	off, ok := args[1].(int64)
	if !ok || off < 0 {
		return nil, fmt.Errorf("tensor storage offset is %s", describe(args[1]))
	}
	shape, err := intTuple(args[2])
	if err != nil {
		return nil, fmt.Errorf("tensor size: %w", err)
	}
	stride, err := intTuple(args[3])
	if err != nil {
		return nil, fmt.Errorf("tensor stride: %w", err)
	}
	if len(shape) != len(stride) {
		return nil, fmt.Errorf("tensor has %d sizes but %d strides", len(shape), len(stride))
	}
	if len(shape) > maxRank {
		return nil, fmt.Errorf("tensor rank %d is beyond the limit of %d", len(shape), maxRank)
	}
	return &tensorRef{storage: st, offset: off, shape: shape, stride: stride}, nil
}

func intTuple(v any) ([]int64, error) {
	t, ok := v.(pyTuple)
	if !ok {
		return nil, fmt.Errorf("%s is not a tuple", describe(v))
	}
	out := make([]int64, len(t))
	for i, x := range t {
		n, ok := x.(int64)
		if !ok || n < 0 {
			return nil, fmt.Errorf("element %d is %s, not a size", i, describe(x))
		}
		out[i] = n
	}
	return out, nil
}

// describe names a pickled value's type for error messages.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		return "a bool"
	case int64:
		return fmt.Sprintf("the integer %d", x)
	case *big.Int:
		return "a large integer"
	case float64:
		return "a float"
	case string:
		if len(x) > 40 {
			x = x[:40] + "…"
		}
		return fmt.Sprintf("the string %q", x)
	case []byte:
		return "bytes"
	case pyTuple:
		return fmt.Sprintf("a %d-tuple", len(x))
	case *pyList:
		return "a list"
	case *pyDict:
		return "a dict"
	case pyGlobal:
		return "the class " + x.String()
	case *pyObject:
		if x.class.name == "" {
			return "an object"
		}
		return "a " + x.class.String() + " object"
	case *storageRef:
		return "a storage"
	case *tensorRef:
		return "a tensor"
	}
	return fmt.Sprintf("%T", v)
}
