//go:build cuda

package cuda

import (
	"io"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// newTargetBackend starts a bf16 backend whose kernels compile for arch.
func newTargetBackend(t *testing.T, arch string) (*gpu, error) {
	t.Helper()
	cfg := testConfig(BF16)
	cfg.Arch = arch
	be, err := New(cfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { be.Close() })
	return be.(*gpu), nil
}

// TestPortableTarget: compiled for sm_80 on this GPU, the backend runs the
// portable kernels (no wgmma attention or convolution, no programmatic
// dependent launch) and says so; a target above the GPU is refused at start.
func TestPortableTarget(t *testing.T) {
	g, err := newTargetBackend(t, "sm_80")
	if err != nil {
		t.Fatal(err)
	}
	if k := g.Kernels(); !strings.Contains(k, string(FamilyPortable)) || !strings.Contains(k, "compute_80") {
		t.Errorf("Kernels() = %q, want the portable family and compute_80", k)
	}
	if g.kernels.hopper() || g.launcher.pdl {
		t.Errorf("sm_80 target: hopper kernels %v, PDL %v; want both off", g.kernels.hopper(), g.launcher.pdl)
	}
	// The DPT head's widest 3×3 convolution at 518×378 and a full page.
	if kind, _ := g.conv3Kernel(256, 256, 518*378/4, 1); kind == conv3WGMMA || kind == conv3WGWide {
		t.Error("sm_80 target: the warpgroup convolution was chosen")
	}
	st, err := g.NewKVStore(backend.KVSpec{Layers: 1, Pages: 2, PageSize: 999, Heads: 1, HeadDim: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer st.(io.Closer).Close()
	if k, _, _, err := g.pagedKernel(g.kv(st), 0); err != nil || k.name != "attn_fa2_paged_bf" {
		t.Errorf("sm_80 target: paged kernel %q (%v), want attn_fa2_paged_bf", k.name, err)
	}
	dev := capability{g.info.major, g.info.minor}
	for _, a := range Arches[1:] {
		want, _, _ := parseArch(a)
		if !dev.less(want) {
			continue
		}
		if _, err := newTargetBackend(t, a); err == nil || !strings.Contains(err.Error(), "above") {
			t.Errorf("arch %s on a %s GPU: error %v, want one saying the target is above the GPU", a, dev, err)
		}
	}
}

// TestSharedLimitOfTarget: compiled for sm_89 or sm_86, whose blocks get
// 99 KB of shared memory, the 32-channel convolution takes the 64×128 tile
// instead of the 32×256 one (115 KB) even on a GPU that would allow it; on
// an sm_80 or sm_87 GPU (163 KB) the 32×256 tile stays.
func TestSharedLimitOfTarget(t *testing.T) {
	g, err := newTargetBackend(t, "auto")
	if err != nil {
		t.Fatal(err)
	}
	dev := capability{g.info.major, g.info.minor}
	arch, want := "sm_80", conv3Tile{32, 256}
	for _, a := range []string{"sm_89", "sm_86"} {
		if c, _, _ := parseArch(a); !dev.less(c) {
			arch, want = a, conv3Tile{64, 128}
			break
		}
	}
	if g, err = newTargetBackend(t, arch); err != nil {
		t.Fatal(err)
	}
	kind, tile := g.conv3Kernel(32, 32, 518*378, 1)
	if kind != conv3MMA || tile != want || tile.smem() > sharedOptin(g.target.cap) {
		t.Errorf("%s target on a %s GPU, 32 channels: kernel %d, tile %v (%d bytes), want the mma.sync kernel with %v", arch, dev, kind, tile, tile.smem(), want)
	}
}
