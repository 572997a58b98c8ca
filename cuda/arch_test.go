package cuda

import (
	"strings"
	"testing"
)

// TestChooseTarget: the compile target and kernel family for each setting
// on the GPUs the backend meets, and the errors for a GPU below sm_80, a
// target above the GPU and an unknown target.
func TestChooseTarget(t *testing.T) {
	h200, orin, rtx4060, t4 := capability{9, 0}, capability{8, 7}, capability{8, 9}, capability{7, 5}
	for _, c := range []struct {
		arch   string
		dev    capability
		want   string // NVRTC target
		family KernelFamily
	}{
		{"auto", h200, "compute_90a", FamilyHopper},
		{"", h200, "compute_90a", FamilyHopper},
		{"sm_90", h200, "compute_90a", FamilyHopper},
		{"sm_89", h200, "compute_89", FamilyPortable},
		{"sm_80", h200, "compute_80", FamilyPortable},
		{"auto", orin, "compute_87", FamilyPortable},
		{"sm_86", orin, "compute_86", FamilyPortable},
		{"auto", rtx4060, "compute_89", FamilyPortable},
		{"auto", capability{8, 0}, "compute_80", FamilyPortable},
		// compute_90a PTX loads only on sm_90: a newer GPU gets compute_90.
		{"sm_90", capability{10, 0}, "compute_90", FamilyPortable},
		{"auto", capability{10, 0}, "compute_100", FamilyPortable},
	} {
		tg, err := chooseTarget(c.arch, "gpu", c.dev)
		if err != nil {
			t.Errorf("arch %q on %s: %v", c.arch, c.dev, err)
			continue
		}
		if tg.arch != c.want || tg.family() != c.family || tg.hopper() != (c.family == FamilyHopper) {
			t.Errorf("arch %q on %s: target %s (%s), want %s (%s)", c.arch, c.dev, tg.arch, tg.family(), c.want, c.family)
		}
	}
	for _, c := range []struct {
		arch string
		dev  capability
		want []string
	}{
		{"auto", t4, []string{`"Tesla T4"`, "7.5", "8.0", "sm_80"}},
		{"sm_80", t4, []string{`"Tesla T4"`, "7.5", "8.0"}},
		{"sm_90", rtx4060, []string{"sm_90", `"Tesla T4"`, "8.9", "up to sm_89"}},
		{"sm_89", orin, []string{"sm_89", "8.7", "up to sm_87"}},
		{"sm_75", h200, []string{`unknown arch "sm_75"`, "sm_80"}},
		{"compute_80", h200, []string{`unknown arch "compute_80"`}},
	} {
		_, err := chooseTarget(c.arch, "Tesla T4", c.dev)
		if err == nil {
			t.Errorf("arch %q on %s: no error", c.arch, c.dev)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("arch %q on %s: error %q does not say %q", c.arch, c.dev, err, w)
			}
		}
	}
}

// TestSharedLimit: a lower target caps shared memory at its own GPUs'
// limit; the GPU's own limit stands otherwise.
func TestSharedLimit(t *testing.T) {
	h200 := 227 << 10
	for _, c := range []struct {
		cap    capability
		device int
		want   int
	}{
		{capability{9, 0}, h200, h200},
		{capability{8, 0}, h200, 163 << 10},
		{capability{8, 6}, h200, 99 << 10},
		{capability{8, 7}, h200, 163 << 10},
		{capability{8, 9}, h200, 99 << 10},
		{capability{8, 9}, 99 << 10, 99 << 10},
		{capability{10, 0}, 228 << 10, 228 << 10}, // not in the table: the GPU's
	} {
		if got := (target{cap: c.cap}).sharedLimit(c.device); got != c.want {
			t.Errorf("%s on a GPU allowing %d: limit %d, want %d", c.cap, c.device, got, c.want)
		}
	}
}
