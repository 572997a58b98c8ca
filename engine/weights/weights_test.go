package weights

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/internal/shared/sharedtest"
)

func openGoldenST(t testing.TB) *SafeTensors {
	t.Helper()
	s, err := OpenSafeTensors(sharedtest.Path(t, "golden", "weights.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func readGolden(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(sharedtest.Path(t, "golden", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sameTensors asserts that two stores hold the same keys, dtypes, shapes and
// bit-identical float32 values.
func sameTensors(t *testing.T, want, got Store) {
	t.Helper()
	if !reflect.DeepEqual(want.Keys(), got.Keys()) {
		t.Fatalf("key sets differ: %d vs %d keys", len(want.Keys()), len(got.Keys()))
	}
	for _, k := range want.Keys() {
		wi, _ := want.Info(k)
		gi, ok := got.Info(k)
		if !ok || !reflect.DeepEqual(wi.Shape, gi.Shape) {
			t.Fatalf("%s: shape %v, want %v", k, gi.Shape, wi.Shape)
		}
		w, err := want.Float32(k)
		if err != nil {
			t.Fatal(err)
		}
		g, err := got.Float32(k)
		if err != nil {
			t.Fatal(err)
		}
		if len(w) != len(g) {
			t.Fatalf("%s: %d values, want %d", k, len(g), len(w))
		}
		for i := range w {
			if math.Float32bits(w[i]) != math.Float32bits(g[i]) {
				t.Fatalf("%s[%d] = %v, want %v (not bit-identical)", k, i, g[i], w[i])
			}
		}
	}
}

func TestGoldenSafeTensorsOpens(t *testing.T) {
	s := openGoldenST(t)
	if n := len(s.Keys()); n != 384 {
		t.Fatalf("golden weights: %d tensors, want 384", n)
	}
	c := NewCursor(s)
	tok, err := c.Sub("aggregator").Get("camera_token", 1, 2, 1, 128)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) != 256 {
		t.Fatalf("camera_token has %d values", len(tok))
	}
	if _, err := c.Get("aggregator.camera_token", 1, 2, 1, 64); err == nil {
		t.Fatal("a wrong shape was accepted")
	}
	if got := c.Unused("aggregator."); len(got) == 0 || got[0] == "aggregator.camera_token" {
		t.Fatalf("Unused after reading camera_token: %v", got[:min(3, len(got))])
	}
}

func TestGoldenPTMatchesSafeTensors(t *testing.T) {
	st := openGoldenST(t)
	pt, err := OpenPT(sharedtest.Path(t, "golden", "weights.pt"))
	if err != nil {
		t.Fatal(err)
	}
	defer pt.Close()
	if n := len(pt.Keys()); n != 384 {
		t.Fatalf("weights.pt: %d tensors, want 384", n)
	}
	for _, k := range pt.Keys() {
		if inf, _ := pt.Info(k); inf.DType != "F32" {
			t.Fatalf("%s: dtype %s, want F32", k, inf.DType)
		}
	}
	sameTensors(t, st, pt)
	// Reading twice after the pages were released must give the same data again.
	a, _ := pt.Float32("aggregator.patch_embed.pos_embed")
	b, _ := st.Float32("aggregator.patch_embed.pos_embed")
	if !reflect.DeepEqual(a, b) {
		t.Fatal("second read differs")
	}
	if err := pt.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pt.Float32("aggregator.camera_token"); err == nil {
		t.Fatal("read after Close succeeded")
	}
}

func TestOpenPicksFormatByContent(t *testing.T) {
	dir := t.TempDir()
	// Names that lie about the content: detection must not trust them.
	ptAsBin := filepath.Join(dir, "a.bin")
	stAsPT := filepath.Join(dir, "b.pt")
	if err := os.WriteFile(ptAsBin, readGolden(t, "weights.pt"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stAsPT, readGolden(t, "weights.safetensors"), 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{ptAsBin: "*weights.PTFile", stAsPT: "*weights.SafeTensors"} {
		s, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := reflect.TypeOf(s).String(); got != want {
			t.Errorf("Open(%s) = %s, want %s", filepath.Base(path), got, want)
		}
		if len(s.Keys()) != 384 {
			t.Errorf("%s: %d keys", path, len(s.Keys()))
		}
		s.Close()
	}

	bad := map[string]struct {
		content []byte
		want    string
	}{
		"empty.safetensors": {nil, "empty"},
		"text.pt":           {[]byte("hello, this is not a checkpoint\n"), "not a checkpoint"},
		"legacy.pt":         {[]byte{0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, 0x2e}, "legacy"},
		"index.json":        {[]byte(`{"weight_map": {"a": "missing.safetensors"}}`), "missing.safetensors"},
		"short.safetensors": {[]byte{1, 2, 3}, "not a checkpoint"},
	}
	for name, c := range bad {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, c.content, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Open(p)
		if err == nil {
			t.Errorf("%s: opened without error", name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: error %q should name the file and say %q", name, err, c.want)
		}
	}
	if _, err := Open(filepath.Join(dir, "nope.pt")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	empty := filepath.Join(dir, "emptydir")
	os.Mkdir(empty, 0o755)
	if _, err := Open(empty); err == nil || !strings.Contains(err.Error(), "no checkpoint") {
		t.Errorf("empty directory: %v", err)
	}
	ptDir := filepath.Join(dir, "ptdir")
	os.Mkdir(ptDir, 0o755)
	os.WriteFile(filepath.Join(ptDir, "lingbot-map.pt"), readGolden(t, "weights.pt"), 0o644)
	s, err := Open(ptDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Keys()) != 384 {
		t.Errorf("directory with one .pt: %d keys", len(s.Keys()))
	}
	s.Close()
}

func TestBuiltPTLayouts(t *testing.T) {
	base := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	half := []float32{0.5, -1.5, 2, 0, 1024, -0.25}
	specs := []ptTensorSpec{
		{name: "plain", storageClass: "FloatStorage", key: "0", numel: 12, shape: []int64{3, 4}, stride: []int64{4, 1}},
		// The transpose of plain, stored as a view of the same storage.
		{name: "transposed", storageClass: "FloatStorage", key: "0", numel: 12, shape: []int64{4, 3}, stride: []int64{1, 4}},
		// Row 1 of plain: a view with a storage offset.
		{name: "row1", storageClass: "FloatStorage", key: "0", numel: 12, offset: 4, shape: []int64{4}, stride: []int64{1}},
		{name: "half", storageClass: "HalfStorage", key: "1", numel: 6, shape: []int64{2, 3}, stride: []int64{3, 1}},
		{name: "bf16", storageClass: "BFloat16Storage", key: "2", numel: 6, shape: []int64{6}, stride: []int64{1}, param: true},
		{name: "scalar", storageClass: "FloatStorage", key: "0", numel: 12, offset: 11, shape: []int64{}, stride: []int64{}},
		{name: "empty", storageClass: "FloatStorage", key: "0", numel: 12, shape: []int64{0, 5}, stride: []int64{5, 1}},
	}
	want := map[string][]float32{
		"plain":      base,
		"transposed": {1, 5, 9, 2, 6, 10, 3, 7, 11, 4, 8, 12},
		"row1":       {5, 6, 7, 8},
		"half":       half,
		"bf16":       half,
		"scalar":     {12},
		"empty":      {},
	}
	storages := map[string][]byte{"0": f32Bytes(base), "1": f16Bytes(t, half), "2": bf16Bytes(half)}
	for _, wrap := range []string{"", "model", "state_dict"} {
		p, err := ParsePT(buildPT(t, statePickle(specs, wrap), storages, false))
		if err != nil {
			t.Fatalf("wrap %q: %v", wrap, err)
		}
		if len(p.Keys()) != len(want) {
			t.Fatalf("wrap %q: keys %v", wrap, p.Keys())
		}
		for k, w := range want {
			got, err := p.Float32(k)
			if err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			if len(got) != len(w) || (len(w) > 0 && !reflect.DeepEqual(got, w)) {
				t.Errorf("wrap %q: %s = %v, want %v", wrap, k, got, w)
			}
		}
		if inf, _ := p.Info("half"); inf.DType != "F16" || !reflect.DeepEqual(inf.Shape, []int{2, 3}) {
			t.Errorf("half: %+v", inf)
		}
		if inf, _ := p.Info("scalar"); len(inf.Shape) != 0 {
			t.Errorf("scalar: %+v", inf)
		}
		// Writing keeps dtypes and gathers strided views.
		var buf bytes.Buffer
		if err := WriteSafeTensors(&buf, p); err != nil {
			t.Fatal(err)
		}
		st, err := ParseSafeTensors(buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if inf, _ := st.Info("bf16"); inf.DType != "BF16" {
			t.Errorf("written bf16 has dtype %s", inf.DType)
		}
		sameTensors(t, p, st)
	}
}

func TestBuiltPTErrors(t *testing.T) {
	f := []float32{1, 2, 3, 4}
	ok := ptTensorSpec{name: "w", storageClass: "FloatStorage", key: "0", numel: 4, shape: []int64{2, 2}, stride: []int64{2, 1}}
	cases := []struct {
		name     string
		spec     ptTensorSpec
		storages map[string][]byte
		compress bool
		want     string
	}{
		{"compressed", ok, map[string][]byte{"0": f32Bytes(f)}, true, "compressed"},
		{"missing storage", ok, map[string][]byte{"7": f32Bytes(f)}, false, "missing from the archive"},
		{"short storage", ok, map[string][]byte{"0": f32Bytes(f[:3])}, false, "12 bytes"},
		{"view past end", ptTensorSpec{name: "w", storageClass: "FloatStorage", key: "0", numel: 4, offset: 1, shape: []int64{2, 2}, stride: []int64{2, 1}},
			map[string][]byte{"0": f32Bytes(f)}, false, "reaches element 4"},
		{"stride overflow", ptTensorSpec{name: "w", storageClass: "FloatStorage", key: "0", numel: 4, shape: []int64{3, 2}, stride: []int64{1 << 62, 1}},
			map[string][]byte{"0": f32Bytes(f)}, false, "overflow"},
		{"rank mismatch", ptTensorSpec{name: "w", storageClass: "FloatStorage", key: "0", numel: 4, shape: []int64{2, 2}, stride: []int64{1}},
			map[string][]byte{"0": f32Bytes(f)}, false, "2 sizes but 1 strides"},
		{"unknown storage", ptTensorSpec{name: "w", storageClass: "QUInt8Storage", key: "0", numel: 4, shape: []int64{4}, stride: []int64{1}},
			map[string][]byte{"0": f32Bytes(f)}, false, "unsupported storage type torch.QUInt8Storage"},
	}
	for _, c := range cases {
		_, err := ParsePT(buildPT(t, statePickle([]ptTensorSpec{c.spec}, ""), c.storages, c.compress))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to say %q", c.name, err, c.want)
		}
	}
	// A pickle whose root is not a dict, and one with a non-tensor entry.
	var p pickleWriter
	p.op(0x80, 2)
	p.int(5)
	p.op('.')
	if _, err := ParsePT(buildPT(t, p.Bytes(), nil, false)); err == nil || !strings.Contains(err.Error(), "not a state dict") {
		t.Errorf("integer root: %v", err)
	}
	p.Reset()
	p.op(0x80, 2, '}', '(')
	p.str("a.weight")
	p.str("oops")
	p.op('u', '.')
	if _, err := ParsePT(buildPT(t, p.Bytes(), nil, false)); err == nil || !strings.Contains(err.Error(), `"a.weight" is the string "oops"`) {
		t.Errorf("string entry: %v", err)
	}
}

func TestTruncatedAndCorruptFilesFailCleanly(t *testing.T) {
	st := readGolden(t, "weights.safetensors")
	pt := readGolden(t, "weights.pt")
	hlen := int(binary.LittleEndian.Uint64(st))
	cuts := []int{0, 1, 7, 8, 9, 100, hlen, hlen + 7, hlen + 8, hlen + 9, len(st) - 4, len(st) - 1}
	for i := 1; i < 60; i++ {
		cuts = append(cuts, len(st)*i/60)
	}
	for _, n := range cuts {
		if _, err := ParseSafeTensors(st[:n]); err == nil {
			t.Errorf("safetensors truncated to %d bytes opened without error", n)
		}
	}
	for i := 0; i < 60; i++ {
		n := len(pt) * i / 60
		if i == 59 {
			n = len(pt) - 1
		}
		if _, err := ParsePT(pt[:n]); err == nil {
			t.Errorf(".pt truncated to %d bytes opened without error", n)
		}
	}
	// Truncated files on disk give errors that name the file.
	dir := t.TempDir()
	for name, b := range map[string][]byte{"cut.safetensors": st[:len(st)/2], "cut.pt": pt[:len(pt)/2]} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o644)
		if _, err := Open(p); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v", name, err)
		}
	}

	// Flip bytes all over the header: any outcome but a panic is acceptable,
	// and whatever opens must be fully readable.
	buf := make([]byte, len(st))
	for pos := 0; pos < 8+hlen; pos += 8 + hlen/400 {
		copy(buf, st)
		buf[pos] ^= 0x5a
		s, err := ParseSafeTensors(buf)
		if err != nil {
			continue
		}
		for _, k := range s.Keys() {
			if _, err := s.Float32(k); err != nil {
				t.Fatalf("flip at %d: opened but %s unreadable: %v", pos, k, err)
			}
		}
	}
	// Flipping storage bytes of the .pt changes values but not structure;
	// flipping directory bytes must not panic.
	for pos := len(pt) - 40000; pos < len(pt); pos += 251 {
		pt[pos] ^= 0xff
		p, err := ParsePT(pt)
		pt[pos] ^= 0xff
		if err == nil {
			for _, k := range p.Keys() {
				if _, err := p.Float32(k); err != nil {
					t.Fatalf("flip at %d: %s unreadable: %v", pos, k, err)
				}
			}
		}
	}
}

// editHeader rewrites the golden header through fn and reassembles a file.
func editHeader(t *testing.T, fn func(h map[string]any)) []byte {
	t.Helper()
	st := readGolden(t, "weights.safetensors")
	hlen := binary.LittleEndian.Uint64(st)
	var h map[string]any
	if err := json.Unmarshal(st[8:8+hlen], &h); err != nil {
		t.Fatal(err)
	}
	fn(h)
	hj, _ := json.Marshal(h)
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(hj)))
	out = append(out, hj...)
	return append(out, st[8+hlen:]...)
}

func TestSafeTensorsHeaderChecks(t *testing.T) {
	entry := func(h map[string]any, k string) map[string]any { return h[k].(map[string]any) }
	cases := []struct {
		name string
		edit func(h map[string]any)
		want string
	}{
		{"wrong dtype size", func(h map[string]any) { entry(h, "aggregator.camera_token")["dtype"] = "F16" }, "needs 512"},
		{"unknown dtype", func(h map[string]any) { entry(h, "aggregator.camera_token")["dtype"] = "Q4" }, `unsupported dtype "Q4"`},
		{"negative dim", func(h map[string]any) { entry(h, "aggregator.camera_token")["shape"] = []int{-1, 256} }, "negative dimension"},
		{"absurd shape", func(h map[string]any) {
			entry(h, "aggregator.camera_token")["shape"] = []int64{1 << 40, 1 << 40, 1 << 40}
		}, "too large"},
		{"overlap", func(h map[string]any) {
			e := entry(h, "aggregator.camera_token")
			e2 := entry(h, "aggregator.scale_token")
			e2["data_offsets"] = e["data_offsets"]
			e2["shape"], e2["dtype"] = e["shape"], e["dtype"]
		}, "overlap"},
		{"offsets past end", func(h map[string]any) {
			o := entry(h, "aggregator.camera_token")["data_offsets"].([]any)
			entry(h, "aggregator.camera_token")["data_offsets"] = []float64{o[0].(float64) + 2e7, o[1].(float64) + 2e7}
		}, "file truncated"},
		{"bad offsets", func(h map[string]any) { entry(h, "aggregator.camera_token")["data_offsets"] = []int{5} }, "must be [begin, end]"},
		{"reversed offsets", func(h map[string]any) { entry(h, "aggregator.camera_token")["data_offsets"] = []int{10, 5} }, "bad data_offsets"},
		{"missing tensor leaves a hole", func(h map[string]any) { delete(h, "aggregator.camera_token") }, "unused bytes"},
		{"no dtype", func(h map[string]any) { delete(entry(h, "aggregator.camera_token"), "dtype") }, "no dtype"},
		{"unknown field", func(h map[string]any) { entry(h, "aggregator.camera_token")["foo"] = 1 }, "unknown field"},
		{"fractional dim", func(h map[string]any) { entry(h, "aggregator.camera_token")["shape"] = []float64{1.5} }, "bad header entry"},
		{"metadata not strings", func(h map[string]any) { h["__metadata__"] = map[string]any{"a": 1} }, "__metadata__"},
		{"entry not an object", func(h map[string]any) { h["aggregator.camera_token"] = "x" }, "bad header entry"},
	}
	for _, c := range cases {
		_, err := ParseSafeTensors(editHeader(t, c.edit))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to say %q", c.name, err, c.want)
		}
	}
	raw := func(header string, data int) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
		return append(append(b, header...), make([]byte, data)...)
	}
	rawCases := []struct {
		name string
		file []byte
		want string
	}{
		{"duplicate key", raw(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2), "appears twice"},
		{"trailing bytes", raw(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 3), "data section has 3"},
		{"not an object", raw(`[1,2]`, 0), "not a JSON object"},
		{"garbage after header", raw(`{} {}`, 0), "after the end"},
		{"header length beyond file", binary.LittleEndian.AppendUint64(nil, 1000), "exceeds the file"},
		{"huge header length", binary.LittleEndian.AppendUint64(nil, 1<<62), "limit"},
	}
	for _, c := range rawCases {
		_, err := ParseSafeTensors(c.file)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to say %q", c.name, err, c.want)
		}
	}
	// Valid corner cases: no tensors, a scalar, a zero-size tensor.
	s, err := ParseSafeTensors(raw(`{"__metadata__":{"k":"v"},"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"z":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]}}  `, 4))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := s.Float32("s"); len(v) != 1 {
		t.Errorf("scalar read as %v", v)
	}
	if v, err := s.Float32("z"); err != nil || len(v) != 0 {
		t.Errorf("zero-size tensor: %v %v", v, err)
	}
	if s.Metadata()["k"] != "v" {
		t.Errorf("metadata %v", s.Metadata())
	}
}

func TestWriteSafeTensorsRoundTrip(t *testing.T) {
	golden := openGoldenST(t)
	var buf bytes.Buffer
	if err := WriteSafeTensors(&buf, golden); err != nil {
		t.Fatal(err)
	}
	back, err := ParseSafeTensors(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	sameTensors(t, golden, back)
	if back.base%8 != 0 {
		t.Errorf("data section starts at %d, not 8-byte aligned", back.base)
	}

	m := Random(TinyArch(), 3)
	buf.Reset()
	if err := WriteSafeTensors(&buf, m); err != nil {
		t.Fatal(err)
	}
	back, err = ParseSafeTensors(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	sameTensors(t, m, back)

	path := filepath.Join(t.TempDir(), "r.safetensors")
	if err := WriteSafeTensorsFile(path, m); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sameTensors(t, m, s)
	if err := WriteSafeTensorsFile(filepath.Join(t.TempDir(), "no", "such", "dir", "x.safetensors"), m); err == nil {
		t.Error("writing into a missing directory succeeded")
	}
}

func TestShardedRoundTrip(t *testing.T) {
	golden := openGoldenST(t)
	dir := t.TempDir()
	if err := WriteSharded(dir, golden, 4<<20); err != nil {
		t.Fatal(err)
	}
	shards, _ := filepath.Glob(filepath.Join(dir, "model-*-of-*.safetensors"))
	if len(shards) < 4 {
		t.Fatalf("%d shards for 19 MB at 4 MB each", len(shards))
	}
	for _, p := range []string{dir, filepath.Join(dir, IndexFile)} {
		s, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		sameTensors(t, golden, s)
		if a, err := Check(s); err != nil || a != TinyArch() {
			t.Errorf("Check(sharded) = %v, %v", a, err)
		}
		s.Close()
	}

	// Without the index the directory's shards are joined as they are.
	noIdx := t.TempDir()
	for _, p := range shards {
		b, _ := os.ReadFile(p)
		os.WriteFile(filepath.Join(noIdx, filepath.Base(p)), b, 0o644)
	}
	s, err := Open(noIdx)
	if err != nil {
		t.Fatal(err)
	}
	sameTensors(t, golden, s)
	s.Close()
	// The same tensor in two shards is an error.
	b, _ := os.ReadFile(shards[0])
	os.WriteFile(filepath.Join(noIdx, "copy.safetensors"), b, 0o644)
	if _, err := Open(noIdx); err == nil || !strings.Contains(err.Error(), "in both") {
		t.Errorf("duplicate shard: %v", err)
	}

	// An index that disagrees with its shards names the problem.
	idxPath := filepath.Join(dir, IndexFile)
	var idx shardIndex
	ib, _ := os.ReadFile(idxPath)
	json.Unmarshal(ib, &idx)
	moved := "aggregator.camera_token"
	orig := idx.WeightMap[moved]
	for _, f := range idx.WeightMap {
		if f != orig {
			idx.WeightMap[moved] = f
			break
		}
	}
	ib, _ = json.Marshal(idx)
	os.WriteFile(idxPath, ib, 0o644)
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), `"aggregator.camera_token" is listed in`) {
		t.Errorf("stale index: %v", err)
	}
	idx.WeightMap[moved] = "../outside.safetensors"
	ib, _ = json.Marshal(idx)
	os.WriteFile(idxPath, ib, 0o644)
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "not a file name inside") {
		t.Errorf("escaping index: %v", err)
	}
	idx.WeightMap[moved] = orig
	ib, _ = json.Marshal(idx)
	os.WriteFile(idxPath, ib, 0o644)
	os.Remove(shards[len(shards)-1])
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), filepath.Base(shards[len(shards)-1])) {
		t.Errorf("missing shard: %v", err)
	}
}
