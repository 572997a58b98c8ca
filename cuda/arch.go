package cuda

import (
	"fmt"
	"slices"
	"strings"
)

// Compute capabilities. The kernels need sm_80 at least (bf16 mma.sync,
// cp.async, cvt.rn.bf16x2); on sm_90 they also use the Hopper-only warpgroup
// MMAs (wgmma), TMA copies and programmatic dependent launch, which NVRTC
// emits only when compiling for compute_90a.

// Arches are the values of Config.Arch: "auto" compiles for the GPU's own
// capability, the others for a lower target than the GPU (sm_80 runs the
// portable kernels on a Hopper GPU, as they run on the GPUs robots carry).
var Arches = []string{"auto", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90"}

// minCapability is the oldest GPU the kernels run on (Ampere A100, sm_80).
var minCapability = capability{8, 0}

// capability is a compute capability (major.minor).
type capability struct{ major, minor int }

func (c capability) String() string { return fmt.Sprintf("sm_%d%d", c.major, c.minor) }

func (c capability) less(o capability) bool {
	return c.major < o.major || c.major == o.major && c.minor < o.minor
}

// KernelFamily names the kernels a target runs: the Hopper family (wgmma,
// TMA, programmatic dependent launch) or the portable one (mma.sync and
// cp.async, every GPU from sm_80).
type KernelFamily string

const (
	FamilyHopper   KernelFamily = "hopper (wgmma, TMA, PDL)"
	FamilyPortable KernelFamily = "portable (mma.sync, cp.async)"
)

// sharedOptin is the most shared memory a block may have on a GPU of
// capability c once a kernel's limit is raised (the CUDA programming guide's
// table of compute capabilities); 0 for one not listed.
func sharedOptin(c capability) int {
	switch c {
	case capability{8, 0}, capability{8, 7}:
		return 163 << 10
	case capability{8, 6}, capability{8, 9}:
		return 99 << 10
	case capability{9, 0}:
		return 227 << 10
	}
	return 0
}

// sharedLimit is the shared memory a block may use: the GPU's, or a lower
// target's, so that a run for sm_86 on a Hopper GPU picks the kernels an
// RTX 30 would.
func (t target) sharedLimit(device int) int {
	if l := sharedOptin(t.cap); l > 0 && l < device {
		return l
	}
	return device
}

// target is what the kernels are compiled for on one GPU.
type target struct {
	cap capability
	// arch is NVRTC's --gpu-architecture value: compute_XY, or compute_90a
	// when the Hopper-only instructions are allowed.
	arch string
}

// hopper says whether the Hopper-only kernels run: only PTX for compute_90a
// has them, and it loads only on an sm_90 GPU.
func (t target) hopper() bool { return t.arch == "compute_90a" }

// fp8MMA says whether mma.sync takes e4m3 operands on this target (sm_89
// and later), which the portable FP8 kernel then uses (kernels/fp8.cuh,
// F8_MMA).
func (t target) fp8MMA() bool { return !t.cap.less(capability{8, 9}) }

func (t target) family() KernelFamily {
	if t.hopper() {
		return FamilyHopper
	}
	return FamilyPortable
}

// parseArch reads a Config.Arch value: ok false for "auto" (or empty).
func parseArch(s string) (c capability, ok bool, err error) {
	if s == "" || s == "auto" {
		return c, false, nil
	}
	if !slices.Contains(Arches, s) {
		return c, false, fmt.Errorf("cuda: unknown arch %q (want one of %s)", s, strings.Join(Arches, ", "))
	}
	// Every listed target is sm_ and two digits.
	return capability{int(s[3] - '0'), int(s[4] - '0')}, true, nil
}

// chooseTarget picks the compile target for a GPU named name with
// capability dev from the setting arch (Config.Arch). A GPU below sm_80, or
// a target above the GPU, is an error that says which.
func chooseTarget(arch, name string, dev capability) (target, error) {
	if dev.less(minCapability) {
		return target{}, fmt.Errorf("cuda: GPU %q has compute capability %d.%d; the kernels need %d.%d (sm_80, Ampere) or later",
			name, dev.major, dev.minor, minCapability.major, minCapability.minor)
	}
	want, set, err := parseArch(arch)
	if err != nil {
		return target{}, err
	}
	if !set {
		want = dev
	}
	if dev.less(want) {
		return target{}, fmt.Errorf("cuda: arch %s is above GPU %q (compute capability %d.%d): PTX for a newer GPU does not load on an older one; use auto or a target up to %s",
			want, name, dev.major, dev.minor, dev)
	}
	t := target{cap: want, arch: fmt.Sprintf("compute_%d%d", want.major, want.minor)}
	// compute_90a PTX loads only on sm_90 itself, so a newer GPU asked for
	// sm_90 gets plain compute_90 (and the portable kernels).
	if want == (capability{9, 0}) && dev == want {
		t.arch = "compute_90a"
	}
	return t, nil
}
