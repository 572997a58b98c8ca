package weights

import (
	"encoding/binary"
	"math"
	"reflect"
	"strconv"
	"testing"
)

func TestDecodeFloat32(t *testing.T) {
	u16 := func(v ...uint16) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint16(b, x)
		}
		return b
	}
	inf := float32(math.Inf(1))
	cases := []struct {
		dtype string
		raw   []byte
		want  []float32
	}{
		// 1, -2, smallest subnormal 2^-24, largest normal, +Inf, 0.5
		{"F16", u16(0x3c00, 0xc000, 0x0001, 0x7bff, 0x7c00, 0x3800), []float32{1, -2, 1.0 / (1 << 24), 65504, inf, 0.5}},
		{"BF16", u16(0x3f80, 0xc000, 0x7f80), []float32{1, -2, inf}},
		{"F32", binary.LittleEndian.AppendUint32(nil, math.Float32bits(-3.25)), []float32{-3.25}},
		{"F64", binary.LittleEndian.AppendUint64(nil, math.Float64bits(0.125)), []float32{0.125}},
		{"I64", binary.LittleEndian.AppendUint64(nil, uint64(1<<64-7)), []float32{-7}},
		{"I32", binary.LittleEndian.AppendUint32(nil, uint32(1<<32-3)), []float32{-3}},
		{"I16", u16(0xfffe), []float32{-2}},
		{"U16", u16(0xfffe), []float32{65534}},
		{"I8", []byte{0xff, 5}, []float32{-1, 5}},
		{"U8", []byte{0xff, 5}, []float32{255, 5}},
		{"BOOL", []byte{1, 0}, []float32{1, 0}},
	}
	for _, c := range cases {
		got, err := DecodeFloat32(c.dtype, c.raw)
		if err != nil {
			t.Fatalf("%s: %v", c.dtype, err)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v, want %v", c.dtype, got, c.want)
		}
	}
	if neg, _ := DecodeFloat32("F16", u16(0x8000)); math.Float32bits(neg[0]) != 0x80000000 {
		t.Errorf("F16 -0 decoded as %v", neg[0])
	}
	if nan, _ := DecodeFloat32("F16", u16(0x7e00)); !math.IsNaN(float64(nan[0])) {
		t.Errorf("F16 NaN decoded as %v", nan[0])
	}
	for _, bad := range []struct {
		dtype string
		raw   []byte
	}{{"F32", []byte{1, 2, 3}}, {"Q8", []byte{1}}, {"F8_E4M3", []byte{1}}} {
		if _, err := DecodeFloat32(bad.dtype, bad.raw); err == nil {
			t.Errorf("%s of %d bytes decoded without error", bad.dtype, len(bad.raw))
		}
	}
}

// torch.save(model.state_dict()) pickles the OrderedDict's _metadata
// attribute with BUILD and sets items in batches of 1000.
func TestPTStateDictWithMetadataAndBatches(t *testing.T) {
	const n = 1342
	var p pickleWriter
	p.op(0x80, 2)
	p.global("collections", "OrderedDict")
	p.op(')', 'R', 'q', 0)
	for i := 0; i < n; i++ {
		if i%1000 == 0 {
			if i > 0 {
				p.op('u')
			}
			p.op('(')
		}
		p.str(keyName(i))
		p.tensor(ptTensorSpec{storageClass: "FloatStorage", key: "0", numel: n, offset: int64(i), shape: []int64{1}, stride: []int64{1}})
	}
	p.op('u')
	p.op('}', '(')
	p.str("_metadata")
	p.global("collections", "OrderedDict")
	p.op(')', 'R', '(')
	p.str("")
	p.op('}', '(')
	p.str("version")
	p.int(1)
	p.op('u', 'u', 'u', 'b', '.')
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(i) / 2
	}
	pt, err := ParsePT(buildPT(t, p.Bytes(), map[string][]byte{"0": f32Bytes(vals)}, false))
	if err != nil {
		t.Fatal(err)
	}
	if len(pt.Keys()) != n {
		t.Fatalf("%d keys, want %d", len(pt.Keys()), n)
	}
	for _, i := range []int{0, 999, 1000, n - 1} {
		v, err := pt.Float32(keyName(i))
		if err != nil || len(v) != 1 || v[0] != vals[i] {
			t.Errorf("%s = %v (%v), want [%v]", keyName(i), v, err, vals[i])
		}
	}
}

func keyName(i int) string { return "layer." + string(rune('a'+i%26)) + "." + strconv.Itoa(i) }
