//go:build nvrtc

package cuda

import (
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gorgonia.org/cu/nvrtc"
)

// wantVariant finds the kernels a module compiles one at a time
// (#ifdef WANT_name; the loader's "file+name" modules).
var wantVariant = regexp.MustCompile(`(?m)^#ifdef WANT_(\w+)`)

// hopperOnly are kernels that exist only in the sm_90a pass (their whole
// definition is inside #ifdef __CUDA_ARCH_FEAT_SM90_ALL; the Go code launches
// them only on Hopper).
var hopperOnly = []string{"conv3_wg_tf32", "conv3_wg_tf32_w"}

// TestKernelsCompile compiles every kernel module, production and lab, with
// NVRTC as the loader does, for every target the backend compiles for
// (chooseTarget): Hopper (compute_90a) and the portable targets compute_80,
// 86, 87, 89 and 90 (Ampere, RTX 30, Jetson Orin, Ada, and sm_90 on a GPU
// newer than Hopper), and checks that each kernel the module defines is in
// the PTX. It needs only NVRTC, no GPU: CI links Debian's (test/run.sh).
// CUDA 11.8's NVRTC knows every one of these targets but compute_90a; the
// Hopper pass then compiles for compute_90 with the sm_90a feature macro
// set, so the wgmma and TMA code is compiled too (its inline PTX is checked
// by ptxas only on a GPU). Variants compiled one at a time (WANT_name), the
// fp32 and exact attention kernels, run in the Hopper pass only (they hold
// no instruction that differs by target, and take most of the time), and
// those of head dim 128 not at all: they are the head-dim-64 bodies unrolled
// further, and the slowest to compile. The Hopper attention module is also
// compiled with each softmax lever's defines (attnVariants, and the lab's
// RowSumMMA) in the Hopper
// pass and for compute_90 and compute_80, where the levers must leave the
// portable code alone; in the Hopper pass each lever's mark is in the PTX
// exactly when it is on (attnMarks).
func TestKernelsCompile(t *testing.T) {
	maj, minor, err := nvrtc.Version()
	if err != nil {
		t.Fatal(err)
	}
	hopper := []string{"--gpu-architecture=compute_90a"}
	if maj < 12 {
		hopper = []string{"--gpu-architecture=compute_90", "-D__CUDA_ARCH_FEAT_SM90_ALL"}
	}
	t.Logf("NVRTC %d.%d; Hopper pass: %s", maj, minor, strings.Join(hopper, " "))
	var portable [][]string
	for _, a := range Arches[1:] { // sm_XY → compute_XY
		portable = append(portable, []string{"--gpu-architecture=compute_" + strings.TrimPrefix(a, "sm_")})
	}
	type module struct {
		file, want string // want: the WANT_ variant, or ""
		defines    []string
		attn       *AttnSettings // the Hopper attention module: its settings
		archs      [][]string
		kernels    []string
	}
	var mods []module
	for _, dir := range []string{"kernels", "dev/kernels"} {
		for _, f := range kernelModules(t, dir) {
			text, err := os.ReadFile(path.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			var own []string
			for _, k := range kernelsIn(string(text)) {
				if !strings.Contains(k, "##") { // names pasted in macros are checked through their variants
					own = append(own, k)
				}
			}
			mods = append(mods, module{file: f, archs: append(slices.Clone(portable), hopper), kernels: own})
			if dir == "kernels" && f == "attention_hopper.cu" {
				mods[len(mods)-1].attn = &AttnSettings{}
				// the GPU tests' variants and the lab's row sums on the tensor cores
				for _, a := range append(slices.Clone(attnVariants), AttnSettings{RowSumMMA: true}) {
					archs := [][]string{hopper, {"--gpu-architecture=compute_90"}, {"--gpu-architecture=compute_80"}}
					mods = append(mods, module{file: f, defines: a.defines(), attn: &a, archs: archs, kernels: own})
				}
			}
			for _, m := range wantVariant.FindAllStringSubmatch(string(text), -1) {
				if !strings.HasSuffix(m[1], "_d128") {
					mods = append(mods, module{file: f, want: m[1], archs: [][]string{hopper}, kernels: append(slices.Clone(own), m[1])})
				}
			}
		}
	}
	for _, m := range mods {
		src, err := kernelSource(kernelRoots(), m.file)
		if err != nil {
			t.Fatal(err)
		}
		for _, arch := range m.archs {
			opts := append([]string{"--std=c++17", "--fmad=true", "-default-device"}, arch...)
			if m.want != "" {
				opts = append(opts, "-DWANT_"+m.want)
			}
			for _, d := range m.defines {
				opts = append(opts, "-D"+d)
			}
			name := m.file + " " + strings.Join(opts[3:], " ")
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ptx, err := compilePTX(src, m.file, opts)
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range m.kernels {
					if !strings.Contains(ptx, ".entry "+k+"(") && (slices.Equal(arch, hopper) || !slices.Contains(hopperOnly, k)) {
						t.Errorf("no kernel %s in the PTX", k)
					}
				}
				if m.attn != nil && slices.Equal(arch, hopper) {
					for lever, mark := range attnMarks(*m.attn) {
						if on := strings.Contains(ptx, mark.text); on != mark.on {
							t.Errorf("lever %s: %q in the PTX is %v, want %v", lever, mark.text, on, mark.on)
						}
					}
				}
				if !slices.Equal(arch, hopper) {
					for _, ins := range hopperInstructions(arch[0]) {
						if strings.Contains(ptx, ins) {
							t.Errorf("the PTX uses %s, which this target's GPUs lack", ins)
						}
					}
				}
			})
		}
	}
}

// attnMarks are PTX text that each softmax lever brings into the Hopper
// attention module and the default build lacks: ex2_poly's rounding
// constant 1.5·2^23, the warp vote of the lazy rescale, the FP8 P·V MMA of
// 72 columns and the bf16 row-sum MMA of 8, the split counter's atomic add,
// the stage releases' plain barrier arrival, the scores-ahead kernels'
// barrier of one warpgroup, the consumers' register claim with a producer
// warpgroup, the ping-pong's turn passed on a named barrier, the key
// halves' meeting before their merge, the byte permute's selector of P's
// integer rounding to bf16 (0x7632) and the 2^-120 of its rounding to e4m3.
func attnMarks(a AttnSettings) map[string]struct {
	text string
	on   bool
} {
	type mark = struct {
		text string
		on   bool
	}
	return map[string]mark{
		"exp_poly":        {"0f4B400000", a.ExpPoly != 0},
		"lazy_rescale":    {"vote.sync.any", a.LazyRescale},
		"rowsum_mma":      {"m64n72k32", a.RowSumMMA},
		"rowsum_mma_bf16": {"m64n8k16", a.RowSumMMA},
		"fold_combine":    {"atom.global.add.u32", a.FoldCombine},
		"free_run":        {"mbarrier.arrive.shared::cta.b64", a.FreeRun != 0 || a.ScoresAhead || a.WarpSpec != 0},
		"scores_ahead":    {"bar.sync wg_bar", a.ScoresAhead},
		"warp_spec":       {"setmaxnreg.inc.sync.aligned.u32", a.WarpSpec != 0},
		"pingpong":        {"bar.arrive turn", a.PingPong},
		"key_halves":      {"bar.sync 5,", a.KeyHalves},
		"p_int":           {", 30258;", a.PInt != 0},
		"p_int_f8":        {"0f03800000", a.PInt == 2},
	}
}

// hopperInstructions are PTX instructions that a portable target's PTX must
// not hold: sm_90a's (warpgroup MMA, TMA bulk copies, register
// reallocation, elect), and below sm_90 programmatic dependent launch's.
func hopperInstructions(archFlag string) []string {
	ins := []string{"wgmma.", "cp.async.bulk", "setmaxnreg", "elect.sync"}
	if !strings.HasSuffix(archFlag, "_90") {
		ins = append(ins, "griddepcontrol")
	}
	return ins
}

func compilePTX(src, name string, opts []string) (string, error) {
	prog, err := nvrtc.CreateProgram(src, name)
	if err != nil {
		return "", err
	}
	defer prog.Destroy()
	if err := prog.Compile(opts...); err != nil {
		log, _ := prog.GetLog()
		return "", &compileError{err: err, log: strings.TrimRight(log, "\x00")}
	}
	return prog.GetPTX()
}

type compileError struct {
	err error
	log string
}

func (e *compileError) Error() string { return e.err.Error() + ":\n" + e.log }
