package cuda

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TestConfigValidate: the production kernels are taken in every build, the
// lab's only with the cudadev tag (else the error says how to get them),
// anything else is named as unknown; so is a compile target not in Arches.
func TestConfigValidate(t *testing.T) {
	ok := func(c Config) {
		t.Helper()
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	bad := func(c Config, want string) {
		t.Helper()
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: error %v, want one with %q", c, err, want)
		}
	}
	d := DefaultConfig()
	ok(d)
	for _, k := range append([]string{""}, PagedKernels...) {
		c := d
		c.PagedKernel = k
		ok(c)
	}
	for _, k := range retiredPagedKernels {
		c := d
		c.PagedKernel = k
		if slices.Contains(labPagedKernels(), k) {
			ok(c)
		} else {
			bad(c, "cudadev")
		}
	}
	c := d
	c.PagedKernel = "flash9"
	bad(c, `unknown paged_kernel "flash9"`)
	c = d
	c.PagedSplits = -1
	bad(c, "paged_splits")
	c = d
	c.Precision = 7
	bad(c, "precision")
	c = d
	c.Device = -1
	bad(c, "device")
	for _, a := range append([]string{""}, Arches...) {
		c = d
		c.Arch = a
		ok(c)
	}
	c = d
	c.Arch = "sm_70"
	bad(c, `unknown arch "sm_70"`)
	for _, a := range attnVariants {
		c = d
		c.Attn = a
		ok(c)
	}
	for _, n := range []int{-1, 3} {
		c = d
		c.Attn.ExpPoly = n
		bad(c, "attn_exp_poly")
		c = d
		c.Attn.FreeRun = n
		bad(c, "attn_free_run")
	}
	c = d
	c.Attn = AttnSettings{ScoresAhead: true, RowSumMMA: true}
	bad(c, "attn_scores_ahead")
	for _, a := range []AttnSettings{{WarpSpec: 1}, {WarpSpec: 4}, {WarpSpec: -1}, {WarpSpec: 2, ScoresAhead: true},
		{WarpSpec: 3, FreeRun: 1}, {WarpSpec: 3, FoldCombine: true}, {WarpSpec: 2, RowSumMMA: true}} {
		c = d
		c.Attn = a
		bad(c, "attn_warp_spec")
	}
	for _, a := range []AttnSettings{{PInt: -1}, {WarpSpec: 2, PInt: 3}} {
		c = d
		c.Attn = a
		bad(c, "attn_p_int")
	}
	for _, a := range []AttnSettings{{PingPong: true}, {WarpSpec: 3, PingPong: true}} {
		c = d
		c.Attn = a
		bad(c, "attn_pingpong")
	}
	for _, a := range []AttnSettings{{KeyHalves: true}, {WarpSpec: 3, KeyHalves: true}, {WarpSpec: 2, KeyHalves: true, PingPong: true},
		{WarpSpec: 2, KeyHalves: true, LazyRescale: true}} {
		c = d
		c.Attn = a
		bad(c, "attn_key_halves")
	}
}

// TestAttnSettingsModules: the default settings name the module as before,
// and every variant names its own module whose defines the kernels know.
func TestAttnSettingsModules(t *testing.T) {
	if m := (AttnSettings{}).hopperModule(); m != "attention_hopper" {
		t.Errorf("default settings: module %q, want attention_hopper", m)
	}
	src, err := os.ReadFile("kernels/attention_hopper.cu")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range attnVariants {
		m := a.hopperModule()
		if seen[m] || !strings.HasPrefix(m, "attention_hopper@") {
			t.Errorf("%v: module %q is not a variant of its own", a, m)
		}
		seen[m] = true
		for _, d := range a.defines() {
			name, _, _ := strings.Cut(d, "=")
			if !strings.Contains(string(src), "#ifndef "+name+"\n") {
				t.Errorf("%v: kernels/attention_hopper.cu has no default for %s", a, name)
			}
		}
	}
}

// attnVariants are the settings the GPU tests compile and run: each lever
// alone, and all of them together (RowSumMMA, which hung, only in the
// NVRTC test).
var attnVariants = []AttnSettings{
	{ExpPoly: 1}, {ExpPoly: 2}, {LazyRescale: true}, {FoldCombine: true}, {FreeRun: 1}, {FreeRun: 2},
	{ScoresAhead: true}, {ScoresAhead: true, LazyRescale: true},
	{WarpSpec: 2}, {WarpSpec: 3}, {WarpSpec: 2, ExpPoly: 1}, {WarpSpec: 2, LazyRescale: true}, {WarpSpec: 2, PingPong: true},
	{WarpSpec: 2, KeyHalves: true}, {WarpSpec: 2, KeyHalves: true, ExpPoly: 1}, {WarpSpec: 2, PInt: 1}, {WarpSpec: 2, PInt: 2}, {WarpSpec: 2, PInt: 2, ExpPoly: 1},
	{ExpPoly: 1, LazyRescale: true, FoldCombine: true, FreeRun: 2},
}
