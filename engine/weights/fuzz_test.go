package weights

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"testing"
)

// checkReadable reads every tensor of a store that opened and checks the
// value count against the shape: a store that opens must be fully usable.
func checkReadable(t *testing.T, s Store) {
	t.Helper()
	firstBad := ""
	defer func() {
		if t.Failed() {
			return
		}
		// ScanFinite reads the stored bytes in place; it must name the first
		// tensor whose float32 values (what the model gets) are not finite.
		err := ScanFinite(s)
		var ne *NonFiniteError
		switch {
		case firstBad == "" && err != nil:
			t.Fatalf("ScanFinite = %v, but every value is finite", err)
		case firstBad != "" && (!errors.As(err, &ne) || ne.Key != firstBad):
			t.Fatalf("ScanFinite = %v, want tensor %q named", err, firstBad)
		}
	}()
	for _, k := range s.Keys() {
		inf, ok := s.Info(k)
		if !ok {
			t.Fatalf("listed key %q has no info", k)
		}
		v, err := s.Float32(k)
		if err != nil {
			t.Fatalf("%q opened but is unreadable: %v", k, err)
		}
		n := 1
		for _, d := range inf.Shape {
			n *= d
		}
		if len(v) != n {
			t.Fatalf("%q: %d values for shape %v", k, len(v), inf.Shape)
		}
		for _, x := range v {
			if firstBad == "" && isFloatDType(inf.DType) && (math.IsNaN(float64(x)) || math.IsInf(float64(x), 0)) {
				firstBad = k
			}
		}
	}
}

func FuzzSafeTensorsHeader(f *testing.F) {
	st := readGolden(f, "weights.safetensors")
	hlen := binary.LittleEndian.Uint64(st)
	// The golden header with the data section cut short of the first tensors,
	// and a re-written small file, plus hand-made headers.
	f.Add(st[:8+hlen+4096])
	var small bytes.Buffer
	m := NewMemStore()
	m.Put("a", []int{2, 3}, []float32{1, 2, 3, 4, 5, 6})
	m.Put("b", []int{}, []float32{7})
	m.Put("c", []int{0}, nil)
	if err := WriteSafeTensors(&small, m); err != nil {
		f.Fatal(err)
	}
	f.Add(small.Bytes())
	for _, h := range []string{
		`{}`,
		`{"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}}`,
		`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}}`,
		`{"__metadata__":{"format":"pt"},"x":{"dtype":"I64","shape":[1,1],"data_offsets":[0,8]}}`,
	} {
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
		f.Add(append(append(b, h...), make([]byte, 8)...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSafeTensors(b)
		if err != nil {
			return
		}
		checkReadable(t, s)
	})
}

func goldenPickle(t testing.TB) []byte {
	t.Helper()
	pt := readGolden(t, "weights.pt")
	zr, err := zip.NewReader(bytes.NewReader(pt), int64(len(pt)))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range zr.File {
		if f.Name == "weights/data.pkl" {
			rc, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			b, err := io.ReadAll(rc)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	t.Fatal("golden weights.pt has no weights/data.pkl")
	return nil
}

func testSpecs() []ptTensorSpec {
	return []ptTensorSpec{
		{name: "a", storageClass: "FloatStorage", key: "0", numel: 6, shape: []int64{2, 3}, stride: []int64{3, 1}},
		{name: "t", storageClass: "FloatStorage", key: "0", numel: 6, shape: []int64{3, 2}, stride: []int64{1, 3}, param: true},
		{name: "h", storageClass: "HalfStorage", key: "1", numel: 2, shape: []int64{2}, stride: []int64{1}},
	}
}

func FuzzPickle(f *testing.F) {
	f.Add(goldenPickle(f))
	f.Add(statePickle(testSpecs(), ""))
	f.Add(statePickle(testSpecs(), "model"))
	f.Add([]byte("\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01]q\x02(K\x01G?\xf0\x00\x00\x00\x00\x00\x00\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x80e\x85u."))
	f.Add([]byte("(lp0\nI1\naS'x'\np1\na(dp2\nV\xc3\xa9\nF1.5\nsg0\n0."))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := unpickle(b)
		if err != nil {
			return
		}
		_ = describe(v)
		_, _ = stateDict(v)
	})
}

func FuzzPT(f *testing.F) {
	storages := map[string][]byte{"0": f32Bytes([]float32{1, 2, 3, 4, 5, 6}), "1": {0, 0x3c, 0, 0xc0}}
	f.Add(buildPT(f, statePickle(testSpecs(), ""), storages, false))
	f.Add(buildPT(f, statePickle(testSpecs(), "model"), storages, false))
	f.Add(buildPT(f, statePickle(testSpecs(), ""), storages, true))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePT(b)
		if err != nil {
			return
		}
		checkReadable(t, p)
	})
}
