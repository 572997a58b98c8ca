package weights

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"math"
	"testing"
)

// pickleWriter emits the protocol-2 opcodes torch.save uses, so tests can
// build .pt files with layouts the golden file does not have (strided views,
// half storages, wrappers).
type pickleWriter struct{ bytes.Buffer }

func (p *pickleWriter) op(b ...byte) { p.Write(b) }
func (p *pickleWriter) global(mod, name string) {
	p.op('c')
	p.WriteString(mod + "\n" + name + "\n")
}
func (p *pickleWriter) str(s string) {
	p.op('X')
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(s)))
	p.Write(n[:])
	p.WriteString(s)
}
func (p *pickleWriter) int(v int64) {
	switch {
	case v >= 0 && v < 256:
		p.op('K', byte(v))
	case v >= 0 && v < 65536:
		p.op('M', byte(v), byte(v>>8))
	case v >= math.MinInt32 && v <= math.MaxInt32:
		var n [4]byte
		binary.LittleEndian.PutUint32(n[:], uint32(int32(v)))
		p.op('J')
		p.Write(n[:])
	default:
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(v))
		p.op(0x8a, 8)
		p.Write(n[:])
	}
}
func (p *pickleWriter) ints(vs []int64) {
	p.op('(')
	for _, v := range vs {
		p.int(v)
	}
	p.op('t')
}

// ptTensorSpec is one state-dict entry of a built checkpoint.
type ptTensorSpec struct {
	name          string
	storageClass  string // "FloatStorage", ...
	key           string
	numel         int64
	offset        int64
	shape, stride []int64
	param         bool // wrap in torch._utils._rebuild_parameter
}

func (p *pickleWriter) tensor(t ptTensorSpec) {
	if t.param {
		p.global("torch._utils", "_rebuild_parameter")
		p.op('(')
	}
	p.global("torch._utils", "_rebuild_tensor_v2")
	p.op('(')
	p.op('(')
	p.str("storage")
	p.global("torch", t.storageClass)
	p.str(t.key)
	p.str("cpu")
	p.int(t.numel)
	p.op('t', 'Q')
	p.int(t.offset)
	p.ints(t.shape)
	p.ints(t.stride)
	p.op(0x89) // requires_grad False
	p.global("collections", "OrderedDict")
	p.op(')', 'R')
	p.op('t', 'R')
	if t.param {
		p.op(0x89)
		p.global("collections", "OrderedDict")
		p.op(')', 'R')
		p.op('t', 'R')
	}
}

// statePickle pickles an OrderedDict of tensors; wrap != "" nests it as
// {wrap: state_dict, "epoch": 3, "args": <opaque object>}.
func statePickle(ts []ptTensorSpec, wrap string) []byte {
	var p pickleWriter
	p.op(0x80, 2)
	if wrap != "" {
		p.op('}', '(')
		p.str("epoch")
		p.int(3)
		p.str("args")
		p.global("argparse", "Namespace")
		p.op(')', 'R')
		p.op('}', '(')
		p.str("lr")
		p.op('G', 0x3f, 0x50, 0x62, 0x4d, 0xd2, 0xf1, 0xa9, 0xfc) // 0.001
		p.op('u', 'b')
		p.str(wrap)
	}
	p.global("collections", "OrderedDict")
	p.op(')', 'R', 'q', 0) // memoised like torch does
	p.op('(')
	for _, t := range ts {
		p.str(t.name)
		p.tensor(t)
	}
	p.op('u')
	if wrap != "" {
		p.op('u')
	}
	p.op('.')
	return p.Bytes()
}

// buildPT writes a torch.save-style zip: prefix/data.pkl, prefix/byteorder,
// prefix/data/<key> for each storage. compress deflates the storages.
func buildPT(t testing.TB, pkl []byte, storages map[string][]byte, compress bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	put := func(name string, data []byte, method uint16) {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: method})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	put("archive/data.pkl", pkl, zip.Store)
	put("archive/byteorder", []byte("little"), zip.Store)
	method := zip.Store
	if compress {
		method = zip.Deflate
	}
	for k, v := range storages {
		put("archive/data/"+k, v, method)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func bf16Bytes(v []float32) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(x)>>16))
	}
	return b
}

// f16Bytes encodes values that are exactly representable in float16.
func f16Bytes(t testing.TB, v []float32) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		bits := math.Float32bits(x)
		sign := uint16(bits>>16) & 0x8000
		exp := int(bits>>23&0xff) - 127 + 15
		mant := bits & 0x7fffff
		var h uint16
		switch {
		case x == 0:
			h = sign
		case exp > 0 && exp < 31 && mant&0x1fff == 0:
			h = sign | uint16(exp)<<10 | uint16(mant>>13)
		default:
			t.Fatalf("%v is not a normal float16", x)
		}
		binary.LittleEndian.PutUint16(b[2*i:], h)
	}
	return b
}
