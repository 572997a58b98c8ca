package cuda

import (
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
}
