package weights

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/lingbotmap/lingbotmap/internal/shared/sharedtest"
)

// retyped is a store that relabels some tensors of an underlying store with
// another dtype and hands out zero bytes of that dtype for them, as a
// checkpoint with integer data under float keys would.
type retyped struct {
	Store
	as map[string]string
}

func (r retyped) Info(name string) (Info, bool) {
	inf, ok := r.Store.Info(name)
	if dt, re := r.as[name]; ok && re {
		inf.DType = dt
	}
	return inf, ok
}

func (r retyped) RawBytes(name string) ([]byte, error) {
	inf, _ := r.Info(name)
	if _, re := r.as[name]; re {
		n := 1
		for _, d := range inf.Shape {
			n *= d
		}
		return make([]byte, n*dtypeSize(inf.DType)), nil
	}
	return r.Store.(RawReader).RawBytes(name)
}

// goldenAsPT rebuilds the golden checkpoint as a torch.save file, with the
// storage class of some keys replaced (their data zeroed to that class's size).
func goldenAsPT(t *testing.T, classes map[string]string) []byte {
	t.Helper()
	st := openGoldenST(t)
	esOf := map[string]int{"LongStorage": 8, "IntStorage": 4, "ByteStorage": 1, "BoolStorage": 1}
	var specs []ptTensorSpec
	storages := map[string][]byte{}
	for i, k := range st.Keys() {
		inf, _ := st.Info(k)
		var n int64 = 1
		shape := make([]int64, len(inf.Shape))
		stride := make([]int64, len(inf.Shape))
		for d := len(inf.Shape) - 1; d >= 0; d-- {
			shape[d], stride[d] = int64(inf.Shape[d]), n
			n *= int64(inf.Shape[d])
		}
		key := strconv.Itoa(i)
		class := "FloatStorage"
		if c, ok := classes[k]; ok {
			class = c
			storages[key] = make([]byte, n*int64(esOf[c]))
		} else {
			b, err := st.RawBytes(k)
			if err != nil {
				t.Fatal(err)
			}
			storages[key] = b
		}
		specs = append(specs, ptTensorSpec{name: k, storageClass: class, key: key, numel: n, shape: shape, stride: stride, param: true})
	}
	return buildPT(t, statePickle(specs, ""), storages, false)
}

func writeTemp(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Integer and boolean data under float keys is refused by name and dtype,
// in both checkpoint formats; the tiny golden model is the base.
func TestCheckRefusesIntegerTensors(t *testing.T) {
	relabel := map[string]string{
		"aggregator.camera_token":                 "I32",
		"camera_head.embed_pose.weight":           "I64",
		"depth_head.norm.bias":                    "U8",
		"aggregator.frame_blocks.0.ls1.gamma":     "BOOL",
		"aggregator.patch_embed.norm.weight":      "I16",
		"aggregator.global_blocks.4.mlp.fc2.bias": "F8_E4M3",
	}
	wantLines := []string{
		"  wrong dtype: aggregator.camera_token is stored as I32 (integers), want a float dtype (F32, F16, BF16 or F64)",
		"  wrong dtype: aggregator.frame_blocks.0.ls1.gamma is stored as BOOL (booleans), want a float dtype (F32, F16, BF16 or F64)",
		"  wrong dtype: aggregator.global_blocks.4.mlp.fc2.bias is stored as F8_E4M3 (8-bit floats, not supported), want a float dtype (F32, F16, BF16 or F64)",
		"  wrong dtype: aggregator.patch_embed.norm.weight is stored as I16 (integers), want a float dtype (F32, F16, BF16 or F64)",
		"  wrong dtype: camera_head.embed_pose.weight is stored as I64 (integers), want a float dtype (F32, F16, BF16 or F64)",
		"  wrong dtype: depth_head.norm.bias is stored as U8 (integers), want a float dtype (F32, F16, BF16 or F64)",
	}
	// .safetensors: written by our writer with the labels, then opened from disk.
	path := filepath.Join(t.TempDir(), "retyped.safetensors")
	if err := WriteSafeTensorsFile(path, retyped{openGoldenST(t), relabel}); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = Check(s)
	var me *MismatchError
	if !errors.As(err, &me) {
		t.Fatalf("Check(retyped safetensors) = %v, want a *MismatchError", err)
	}
	lines := strings.Split(err.Error(), "\n")
	if !strings.Contains(lines[0], "0 missing, 0 unexpected, 0 mis-shaped tensors, 6 with a non-float dtype") {
		t.Errorf("summary %q", lines[0])
	}
	if !reflect.DeepEqual(lines[1:], wantLines) {
		t.Errorf("safetensors detail lines\n%s\nwant\n%s", strings.Join(lines[1:], "\n"), strings.Join(wantLines, "\n"))
	}

	// .pt: LongStorage, IntStorage, ByteStorage and BoolStorage under float keys.
	classes := map[string]string{
		"aggregator.camera_token":             "IntStorage",
		"camera_head.embed_pose.weight":       "LongStorage",
		"depth_head.norm.bias":                "ByteStorage",
		"aggregator.frame_blocks.0.ls1.gamma": "BoolStorage",
	}
	pt, err := Open(writeTemp(t, "retyped.pt", goldenAsPT(t, classes)))
	if err != nil {
		t.Fatal(err)
	}
	defer pt.Close()
	_, err = Check(pt)
	if !errors.As(err, &me) {
		t.Fatalf("Check(retyped pt) = %v, want a *MismatchError", err)
	}
	want := []DTypeMismatch{
		{"aggregator.camera_token", "I32"},
		{"aggregator.frame_blocks.0.ls1.gamma", "BOOL"},
		{"camera_head.embed_pose.weight", "I64"},
		{"depth_head.norm.bias", "U8"},
	}
	if !reflect.DeepEqual(me.WrongType, want) {
		t.Errorf("pt: wrong dtypes %v, want %v", me.WrongType, want)
	}
	if len(me.Missing)+len(me.Extra)+len(me.Misshaped) != 0 {
		t.Errorf("pt: unexpected other problems: %v", err)
	}

	// The same file with every storage a float loads cleanly.
	good, err := Open(writeTemp(t, "good.pt", goldenAsPT(t, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	if _, err := Check(good); err != nil {
		t.Errorf("Check(rebuilt golden pt) = %v", err)
	}
}

// poke overwrites values of a tensor inside a copy of a checkpoint file,
// at flat element indices, through the tensor's location in the file.
func poke(t *testing.T, file []byte, s Store, key string, at map[int64]float32) {
	t.Helper()
	v, ok := s.(viewer).tensorView(key)
	if !ok {
		t.Fatalf("%s is not a view of the file", key)
	}
	inf, _ := s.Info(key)
	if inf.DType != "F32" {
		t.Fatalf("%s is %s", key, inf.DType)
	}
	for i, x := range at {
		copy(file[v.off+4*i:], f32Bytes([]float32{x}))
	}
}

// NaN and Inf weights are found at load, in both formats, naming the first
// affected tensor in key order, its counts and where the first one is.
func TestCheckRefusesNonFiniteWeights(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, name := range []string{"weights.safetensors", "weights.pt"} {
		t.Run(name, func(t *testing.T) {
			orig, err := Open(sharedtest.Path(t, "golden", name))
			if err != nil {
				t.Fatal(err)
			}
			defer orig.Close()
			file := readGolden(t, name)
			// fc1 of block 1 is 512×128 = 65536 values.
			poke(t, file, orig, "aggregator.frame_blocks.1.mlp.fc1.weight", map[int64]float32{60000: nan, 3: inf, 65535: nan})
			poke(t, file, orig, "depth_head.scratch.output_conv1.bias", map[int64]float32{0: float32(math.Inf(-1))})
			s, err := Open(writeTemp(t, name, file))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			_, err = Check(s)
			var ne *NonFiniteError
			if !errors.As(err, &ne) {
				t.Fatalf("Check = %v, want a *NonFiniteError", err)
			}
			want := NonFiniteError{Key: "aggregator.frame_blocks.1.mlp.fc1.weight", DType: "F32", NaN: 2, Inf: 1, Index: 3, Values: 512 * 128, Tensors: 2}
			if *ne != want {
				t.Errorf("got %+v\nwant %+v", *ne, want)
			}
			const msg = `weights: tensor "aggregator.frame_blocks.1.mlp.fc1.weight" (F32) holds 2 NaN and 1 ±Inf of its 65536 values, the first at flat index 3; 2 tensors in all hold non-finite values: the checkpoint is corrupt`
			if err.Error() != msg {
				t.Errorf("message\n%s\nwant\n%s", err, msg)
			}
			// The golden file itself is clean.
			if err := ScanFinite(orig); err != nil {
				t.Errorf("ScanFinite(golden) = %v", err)
			}
		})
	}
}

// Every float dtype, stored or in memory, and a value at every lane
// position and in the tail after the last full 32-byte block.
func TestScanFiniteDTypes(t *testing.T) {
	enc := map[string]func(v []float32) []byte{
		"F32":  f32Bytes,
		"BF16": bf16Bytes,
		"F16": func(v []float32) []byte {
			b := make([]byte, 2*len(v))
			for i, x := range v {
				h := uint16(0x3c00) // 1.0
				switch {
				case math.IsNaN(float64(x)):
					h = 0x7e00
				case math.IsInf(float64(x), 0):
					h = 0x7c00
				}
				b[2*i], b[2*i+1] = byte(h), byte(h>>8)
			}
			return b
		},
		"F64": func(v []float32) []byte {
			b := make([]byte, 8*len(v))
			for i, x := range v {
				bits := math.Float64bits(float64(x))
				for k := range 8 {
					b[8*i+k] = byte(bits >> (8 * k))
				}
			}
			return b
		},
	}
	for dt, e := range enc {
		for _, n := range []int{1, 7, 33, 100} {
			for at := range n {
				for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
					v := make([]float32, n)
					for i := range v {
						v[i] = 1
					}
					v[at] = bad
					b := e(v)
					// every start address modulo 8: the in-place word path and the byte path
					for shift := range 8 {
						sb := make([]byte, len(b)+shift)[shift:]
						copy(sb, b)
						if !anyNonFinite(dt, sb) {
							t.Fatalf("%s n=%d shift %d: %v at %d not found", dt, n, shift, bad, at)
						}
					}
					nan, inf, first := countNonFinite(dt, b)
					if nan+inf != 1 || first != int64(at) || (nan == 1) != math.IsNaN(float64(bad)) {
						t.Fatalf("%s n=%d at=%d: nan %d inf %d first %d", dt, n, at, nan, inf, first)
					}
				}
			}
			ok := make([]float32, n)
			for i := range ok {
				ok[i] = float32(math.MaxFloat32) // largest finite: exponent one below all ones
			}
			if dt == "F16" || dt == "BF16" {
				continue // MaxFloat32 is not finite in these; covered above with 1.0
			}
			for shift := range 8 {
				sb := make([]byte, 4*n*2+shift)[shift:]
				copy(sb, e(ok))
				sb = sb[:len(e(ok))]
				if anyNonFinite(dt, sb) {
					t.Fatalf("%s shift %d: MaxFloat32 reported as non-finite", dt, shift)
				}
			}
		}
	}
	// A finite F64 beyond float32's range loads as ±Inf: it counts.
	f64 := make([]byte, 8*3)
	for i, x := range []float64{1, -1e39, 3.5e38} {
		bits := math.Float64bits(x)
		for k := range 8 {
			f64[8*i+k] = byte(bits >> (8 * k))
		}
	}
	if nan, inf, first := countNonFinite("F64", f64); nan != 0 || inf != 2 || first != 1 || !anyNonFinite("F64", f64) {
		t.Errorf("F64 beyond float32: nan %d inf %d first %d", nan, inf, first)
	}
	// An in-memory store without raw bytes is scanned through Float32.
	m := NewMemStore()
	m.Put("a", []int{2}, []float32{1, 2})
	m.Put("b", []int{3}, []float32{1, float32(math.NaN()), 3})
	var ne *NonFiniteError
	if err := ScanFinite(m); !errors.As(err, &ne) || ne.Key != "b" || ne.Index != 1 {
		t.Errorf("ScanFinite(mem) = %v", err)
	}
}

// The scan reads a mapped checkpoint in place and gives its pages back: it
// must not add the file to the process's resident memory.
func TestScanFiniteReleasesThePages(t *testing.T) {
	st := openGoldenST(t)
	if err := ScanFinite(st); err != nil {
		t.Fatal(err)
	}
	addr := uintptr(unsafe.Pointer(&st.m.data[0]))
	if rss := mappedRSS(t, addr); rss > int64(len(st.m.data))/20 {
		t.Errorf("%d of %d file bytes resident after the scan", rss, len(st.m.data))
	}
}

// BenchmarkScanFinite scans a synthetic 256 MiB F32 tensor in a mapped
// safetensors file (warm page cache) and reports GB/s.
func BenchmarkScanFinite(b *testing.B) {
	const n = 64 << 20
	m := NewMemStore()
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i%1000) * 0.001
	}
	m.Put("big", []int{n}, v)
	path := filepath.Join(b.TempDir(), "big.safetensors")
	if err := WriteSafeTensorsFile(path, m); err != nil {
		b.Fatal(err)
	}
	s, err := OpenSafeTensors(path)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.SetBytes(4 * n)
	b.ResetTimer()
	for b.Loop() {
		if err := ScanFinite(s); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(4*n)*float64(b.N)/1e9/b.Elapsed().Seconds(), "GB/s")
}
