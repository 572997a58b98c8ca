package cuda

import (
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// The kernel sources as the loader sees them: production, then the lab.
func kernelRoots() []fs.FS { return []fs.FS{os.DirFS("kernels"), os.DirFS("dev/kernels")} }

// kernelModules lists the .cu files of a folder (one NVRTC module each).
func kernelModules(t *testing.T, dir string) []string {
	t.Helper()
	files, err := fs.Glob(os.DirFS(dir), "*.cu")
	if err != nil || len(files) == 0 {
		t.Fatalf("no kernel sources in %s: %v", dir, err)
	}
	return files
}

var (
	lineComment  = regexp.MustCompile(`//[^\n]*`)
	blockComment = regexp.MustCompile(`(?s)/\*.*?\*/`)
	// A kernel: extern "C" __global__ … name(, or a kernel-defining macro
	// invoked at the start of a line (TMA_PAGED_KERNEL(name, …)).
	kernelDef = regexp.MustCompile(`extern "C"\s+__global__\s+void\s+(?:__launch_bounds__\([^)]*\)[\s\\]+)?((?:\w|##)+)\s*\(|(?m)^[A-Z_]+_KERNEL\((\w+)`)
	// Preprocessor conditions may name a macro before it is defined.
	condLine = regexp.MustCompile(`(?m)^\s*#\s*(?:if|ifdef|ifndef|elif|undef)\b[^\n]*`)
	// Names a kernel file defines for the others: macros, device
	// functions, structs.
	macroDef  = regexp.MustCompile(`(?m)^\s*#define\s+(\w+)`)
	deviceDef = regexp.MustCompile(`__device__(?:\s+__forceinline__)?\s+[\w:<>]+[\s*&]+(\w+)\s*\(`)
	structDef = regexp.MustCompile(`\bstruct\s+(?:__align__\(\d+\)\s+)?(\w+)\s*\{`)
)

// code strips comments (so that a name mentioned in prose does not count
// as a use).
func code(src string) string {
	return lineComment.ReplaceAllString(blockComment.ReplaceAllString(src, ""), "")
}

// kernelsIn lists the kernels src defines (a macro's parameter, in capitals,
// is not one).
func kernelsIn(src string) []string {
	var names []string
	for _, m := range kernelDef.FindAllStringSubmatch(code(src), -1) {
		if n := m[1] + m[2]; n != strings.ToUpper(n) {
			names = append(names, n)
		}
	}
	return names
}

// TestKernelSourcesAssemble: every production and lab module assembles with
// its includes resolved, each attention kernel the Go code launches is in
// the module it is launched from (after the split by family), and no module
// uses a macro, helper or struct of the kernel sources before (or without)
// defining it: the check that moving code between files and common.cuh
// left every module compilable in the same order.
func TestKernelSourcesAssemble(t *testing.T) {
	want := map[string][]string{
		"attention_fa2.cu":    {"attn_fa2_dense_bf", "attn_fa2_paged_bf", "attn_fa2_paged_f8"},
		"attention_hopper.cu": {"attn_tma3_paged_bf", "attn_wg_paged_bf", "attn_f8_paged"},
		"kvfp8.cu":            {"kv_fp8_calibrate", "write_kv_fp8"},
		"attention_lab.cu":    {"attn_mma_dense", "attn_mma_paged_bf", "attn_tma_paged_bf"},
	}
	modules := map[string]string{}
	for _, dir := range []string{"kernels", "dev/kernels"} {
		for _, f := range kernelModules(t, dir) {
			src, err := kernelSource(kernelRoots(), f)
			if err != nil {
				t.Fatalf("%s/%s: %v", dir, f, err)
			}
			if _, ok := modules[f]; ok {
				t.Fatalf("two kernel modules named %s", f)
			}
			modules[f] = src
		}
	}
	// Names defined anywhere in the kernel sources, and those the split by
	// family moved between files (which must stay defined somewhere).
	defined := map[string]bool{}
	for _, n := range []string{"ex2", "mma_bf16", "load8", "quad_max", "quad_sum", "load_q_frags", "ldmatrix_x4",
		"ldmatrix_x4_trans", "fa_attn", "mma_attn", "wg_paged", "TensorMap", "MQ", "MK", "HD", "SROW", "FQ", "WQ", "WK",
		"WTILE", "WSTAGES", "WSTAGES_TMA", "TMA_PAGED_KERNEL"} {
		defined[n] = true
	}
	for _, src := range modules {
		c := code(src)
		for _, re := range []*regexp.Regexp{macroDef, deviceDef, structDef} {
			for _, m := range re.FindAllStringSubmatch(c, -1) {
				defined[m[1]] = true
			}
		}
	}
	for f, src := range modules {
		if strings.Contains(code(src), `#include "`) {
			t.Errorf("%s: an include was left unresolved", f)
		}
		if names, ok := want[f]; ok {
			got := kernelsIn(src)
			// The lab module includes the Hopper one: its own kernels are
			// what it adds.
			for _, n := range names {
				if !slices.Contains(got, n) {
					t.Errorf("%s: no kernel %s (has %v)", f, n, got)
				}
			}
		}
		checkDefinedBeforeUse(t, f, code(src), defined)
	}
	// Each production kernel lives in one module.
	seen := map[string]string{}
	for _, f := range kernelModules(t, "kernels") {
		b, err := os.ReadFile(path.Join("kernels", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range kernelsIn(string(b)) {
			if other, ok := seen[n]; ok && other != f {
				t.Errorf("kernel %s is defined in %s and %s", n, other, f)
			}
			seen[n] = f
		}
	}
	for _, lab := range want["attention_lab.cu"] {
		if f, ok := seen[lab]; ok {
			t.Errorf("lab kernel %s is in the production module %s", lab, f)
		}
	}
}

// checkDefinedBeforeUse fails when src uses one of the names before the
// first definition of it in src (or never defines it).
func checkDefinedBeforeUse(t *testing.T, module, src string, names map[string]bool) {
	t.Helper()
	defs := map[string]int{}
	for _, re := range []*regexp.Regexp{macroDef, deviceDef, structDef} {
		for _, m := range re.FindAllStringSubmatchIndex(src, -1) {
			n := src[m[2]:m[3]]
			if at, ok := defs[n]; !ok || m[2] < at {
				defs[n] = m[2]
			}
		}
	}
	uses := condLine.ReplaceAllStringFunc(src, func(l string) string { return strings.Repeat(" ", len(l)) })
	for n := range names {
		use := regexp.MustCompile(`\b` + regexp.QuoteMeta(n) + `\b`).FindStringIndex(uses)
		if use == nil {
			continue
		}
		at, ok := defs[n]
		switch {
		case !ok:
			t.Errorf("%s uses %s, which it never defines", module, n)
		case use[0] < at:
			t.Errorf("%s uses %s at %q before defining it", module, n, excerpt(src, use[0]))
		}
	}
}

func excerpt(s string, at int) string {
	return strings.TrimSpace(s[max(0, at-30):min(len(s), at+30)])
}

// TestKernelSourceIncludes: includes are inlined once each, by base name,
// from the first root that has the file, with #line markers, and a missing
// file is an error that names it.
func TestKernelSourceIncludes(t *testing.T) {
	prod := fstest.MapFS{
		"common.cuh": {Data: []byte("#define ONE 1\n")},
		"a.cu":       {Data: []byte("#include \"../x/b.cuh\"\n#include <cuda.h>\nA\n#include \"b.cuh\"\n")},
		"b.cuh":      {Data: []byte("B\n")},
		"bad.cu":     {Data: []byte("#include \"gone.cuh\"\n")},
	}
	lab := fstest.MapFS{"b.cuh": {Data: []byte("LAB B\n")}, "l.cu": {Data: []byte(`#  include "a.cu"` + "\nL\n")}}
	got, err := kernelSource([]fs.FS{prod, lab}, "a.cu")
	if err != nil {
		t.Fatal(err)
	}
	want := "#line 1 \"common.cuh\"\n#define ONE 1\n#line 1 \"a.cu\"\n#line 1 \"b.cuh\"\nB\n#line 2 \"a.cu\"\n#include <cuda.h>\nA\n#line 5 \"a.cu\"\n"
	if got != want {
		t.Errorf("assembled\n%s\nwant\n%s", got, want)
	}
	got, err = kernelSource([]fs.FS{prod, lab}, "l.cu")
	if err != nil || !strings.Contains(got, "\nA\n") || !strings.HasSuffix(got, "L\n") || strings.Contains(got, "LAB B") {
		t.Errorf("lab module: %v\n%s", err, got)
	}
	if _, err := kernelSource([]fs.FS{prod, lab}, "bad.cu"); err == nil || !strings.Contains(err.Error(), `"gone.cuh"`) {
		t.Errorf("missing include: error %v, want one naming gone.cuh", err)
	}
}
