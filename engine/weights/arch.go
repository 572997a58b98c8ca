package weights

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Arch holds the sizes of a LingBot-Map network: everything needed to list
// its state-dict keys and shapes (reference-model.md §17).
type Arch struct {
	EmbedDim    int // aggregator and DINO width E (1024)
	Depth       int // aggregator frame/global block pairs (24)
	Heads       int // aggregator heads (16; head dim = EmbedDim/Heads)
	MLPRatio    int // MLP hidden = MLPRatio × width, everywhere (4)
	DINODepth   int // DINOv2 blocks (24)
	DINOHeads   int // DINOv2 heads (16); not visible in the shapes
	DINOPosGrid int // side of the square position table the DINO was trained with (37)
	PatchSize   int // patch size in pixels (14)
	Registers   int // register tokens (4)
	CameraDim   int // camera head width (2E = 2048)
	CameraDepth int // camera trunk blocks (4)
	CameraHeads int // camera heads (16, head dim 128); not visible in the shapes
	DPTFeatures int // DPT fusion width (256)
	DPTOut      [4]int
	PointHead   bool // a point_head DPT next to depth_head (not in the released checkpoints)
}

// FullArch is the released model (lingbot-map.pt): 1342 tensors.
func FullArch() Arch {
	return Arch{
		EmbedDim: 1024, Depth: 24, Heads: 16, MLPRatio: 4,
		DINODepth: 24, DINOHeads: 16, DINOPosGrid: 37, PatchSize: 14, Registers: 4,
		CameraDim: 2048, CameraDepth: 4, CameraHeads: 16,
		DPTFeatures: 256, DPTOut: [4]int{256, 512, 1024, 1024},
	}
}

// TinyArch is the golden test model (golden/weights.safetensors): 384 tensors.
func TinyArch() Arch {
	return Arch{
		EmbedDim: 128, Depth: 5, Heads: 2, MLPRatio: 4,
		DINODepth: 2, DINOHeads: 2, DINOPosGrid: 5, PatchSize: 14, Registers: 4,
		CameraDim: 256, CameraDepth: 2, CameraHeads: 2,
		DPTFeatures: 32, DPTOut: [4]int{16, 32, 64, 64}, PointHead: true,
	}
}

func (a Arch) String() string {
	return fmt.Sprintf("embed %d, depth %d, heads %d, DINO depth %d heads %d grid %d, camera %d×%d heads %d, DPT %d %v, point head %v",
		a.EmbedDim, a.Depth, a.Heads, a.DINODepth, a.DINOHeads, a.DINOPosGrid, a.CameraDim, a.CameraDepth, a.CameraHeads,
		a.DPTFeatures, a.DPTOut, a.PointHead)
}

// Check reports sizes that cannot describe a network.
func (a Arch) Check() error {
	var errs []error
	pos := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s is %d, must be positive", name, v))
		}
	}
	pos("EmbedDim", a.EmbedDim)
	pos("Depth", a.Depth)
	pos("Heads", a.Heads)
	pos("MLPRatio", a.MLPRatio)
	pos("DINODepth", a.DINODepth)
	pos("DINOHeads", a.DINOHeads)
	pos("DINOPosGrid", a.DINOPosGrid)
	pos("PatchSize", a.PatchSize)
	pos("Registers", a.Registers)
	pos("CameraDim", a.CameraDim)
	pos("CameraDepth", a.CameraDepth)
	pos("CameraHeads", a.CameraHeads)
	pos("DPTFeatures", a.DPTFeatures)
	for i, c := range a.DPTOut {
		pos(fmt.Sprintf("DPTOut[%d]", i), c)
	}
	if a.Heads > 0 && a.EmbedDim%a.Heads != 0 {
		errs = append(errs, fmt.Errorf("EmbedDim %d is not divisible by Heads %d", a.EmbedDim, a.Heads))
	}
	if a.DINOHeads > 0 && a.EmbedDim%a.DINOHeads != 0 {
		errs = append(errs, fmt.Errorf("EmbedDim %d is not divisible by DINOHeads %d", a.EmbedDim, a.DINOHeads))
	}
	if a.CameraHeads > 0 && a.CameraDim%a.CameraHeads != 0 {
		errs = append(errs, fmt.Errorf("CameraDim %d is not divisible by CameraHeads %d", a.CameraDim, a.CameraHeads))
	}
	if a.CameraDim%2 != 0 || a.DPTFeatures%2 != 0 {
		errs = append(errs, fmt.Errorf("CameraDim %d and DPTFeatures %d must be even", a.CameraDim, a.DPTFeatures))
	}
	return errors.Join(errs...)
}

// paramKind says how a tensor is initialised (and what kind of module owns it).
type paramKind int

const (
	kindLinear paramKind = iota // Linear / Conv2d weight: fan-in = prod(shape[1:])
	kindConvT                   // ConvTranspose2d weight: fan-in = shape[0]
	kindNormW                   // LayerNorm weight
	kindNormB                   // LayerNorm bias
	kindBias                    // Linear / Conv bias
	kindGamma                   // LayerScale
	kindToken                   // tokens, position tables
)

type param struct {
	name  string
	shape []int
	kind  paramKind
}

type paramList []param

func (l *paramList) add(name string, kind paramKind, shape ...int) {
	*l = append(*l, param{name, shape, kind})
}

func (l *paramList) linear(name string, out, in int) {
	l.add(name+".weight", kindLinear, out, in)
	l.add(name+".bias", kindBias, out)
}

func (l *paramList) norm(name string, dim int) {
	l.add(name+".weight", kindNormW, dim)
	l.add(name+".bias", kindNormB, dim)
}

func (l *paramList) conv(name string, out, in, k int, bias bool) {
	l.add(name+".weight", kindLinear, out, in, k, k)
	if bias {
		l.add(name+".bias", kindBias, out)
	}
}

// block adds a pre-norm transformer block (norm1, attn, ls1, norm2, mlp, ls2).
func (l *paramList) block(p string, dim, ratio, qkNormDim int) {
	l.norm(p+"norm1", dim)
	l.linear(p+"attn.qkv", 3*dim, dim)
	if qkNormDim > 0 {
		l.norm(p+"attn.q_norm", qkNormDim)
		l.norm(p+"attn.k_norm", qkNormDim)
	}
	l.linear(p+"attn.proj", dim, dim)
	l.add(p+"ls1.gamma", kindGamma, dim)
	l.norm(p+"norm2", dim)
	l.linear(p+"mlp.fc1", ratio*dim, dim)
	l.linear(p+"mlp.fc2", dim, ratio*dim)
	l.add(p+"ls2.gamma", kindGamma, dim)
}

// dptHidden is the width of the DPT head's last hidden conv (fixed in the reference).
const dptHidden = 32

func (l *paramList) dpt(p string, dimIn, feat int, oc [4]int, outDim int) {
	l.norm(p+"norm", dimIn)
	for i, c := range oc {
		l.conv(p+"projects."+strconv.Itoa(i), c, dimIn, 1, true)
	}
	l.add(p+"resize_layers.0.weight", kindConvT, oc[0], oc[0], 4, 4)
	l.add(p+"resize_layers.0.bias", kindBias, oc[0])
	l.add(p+"resize_layers.1.weight", kindConvT, oc[1], oc[1], 2, 2)
	l.add(p+"resize_layers.1.bias", kindBias, oc[1])
	l.conv(p+"resize_layers.3", oc[3], oc[3], 3, true)
	for i, c := range oc {
		l.conv(fmt.Sprintf("%sscratch.layer%d_rn", p, i+1), feat, c, 3, false)
	}
	for r := 1; r <= 4; r++ {
		rp := fmt.Sprintf("%sscratch.refinenet%d.", p, r)
		for u := 1; u <= 2; u++ {
			if r == 4 && u == 1 { // refinenet4 has no first residual unit
				continue
			}
			for c := 1; c <= 2; c++ {
				l.conv(fmt.Sprintf("%sresConfUnit%d.conv%d", rp, u, c), feat, feat, 3, true)
			}
		}
		l.conv(rp+"out_conv", feat, feat, 1, true)
	}
	l.conv(p+"scratch.output_conv1", feat/2, feat, 3, true)
	l.conv(p+"scratch.output_conv2.0", dptHidden, feat/2, 3, true)
	l.conv(p+"scratch.output_conv2.2", outDim, dptHidden, 1, true)
}

// params lists every tensor of the architecture in module order.
func (a Arch) params() paramList {
	var l paramList
	E, R, r := a.EmbedDim, a.Registers, a.MLPRatio
	l.add("aggregator.camera_token", kindToken, 1, 2, 1, E)
	l.add("aggregator.register_token", kindToken, 1, 2, R, E)
	l.add("aggregator.scale_token", kindToken, 1, 2, 1, E)
	pe := "aggregator.patch_embed."
	l.add(pe+"cls_token", kindToken, 1, 1, E)
	l.add(pe+"pos_embed", kindToken, 1, 1+a.DINOPosGrid*a.DINOPosGrid, E)
	l.add(pe+"register_tokens", kindToken, 1, R, E)
	l.add(pe+"mask_token", kindToken, 1, E)
	l.conv(pe+"patch_embed.proj", E, 3, a.PatchSize, true)
	for i := 0; i < a.DINODepth; i++ {
		l.block(fmt.Sprintf("%sblocks.%d.", pe, i), E, r, 0)
	}
	l.norm(pe+"norm", E)
	hd := 0
	if a.Heads > 0 {
		hd = E / a.Heads
	}
	for _, kind := range []string{"frame", "global"} {
		for i := 0; i < a.Depth; i++ {
			l.block(fmt.Sprintf("aggregator.%s_blocks.%d.", kind, i), E, r, hd)
		}
	}
	C := a.CameraDim
	for i := 0; i < a.CameraDepth; i++ {
		l.block(fmt.Sprintf("camera_head.trunk.%d.", i), C, r, 0)
	}
	l.norm("camera_head.token_norm", C)
	l.norm("camera_head.trunk_norm", C)
	l.add("camera_head.empty_pose_tokens", kindToken, 1, 1, 9)
	l.linear("camera_head.embed_pose", C, 9)
	l.linear("camera_head.poseLN_modulation.1", 3*C, C)
	l.linear("camera_head.pose_branch.fc1", C/2, C)
	l.linear("camera_head.pose_branch.fc2", 9, C/2)
	l.dpt("depth_head.", 2*E, a.DPTFeatures, a.DPTOut, 2)
	if a.PointHead {
		l.dpt("point_head.", 2*E, a.DPTFeatures, a.DPTOut, 4)
	}
	return l
}

// Shapes lists every state-dict key of the architecture with its shape.
func (a Arch) Shapes() map[string][]int {
	ps := a.params()
	out := make(map[string][]int, len(ps))
	for _, p := range ps {
		out[p.name] = p.shape
	}
	return out
}

// NumParams is the number of scalar parameters.
func (a Arch) NumParams() int64 {
	var n int64
	for _, p := range a.params() {
		k := int64(1)
		for _, d := range p.shape {
			k *= int64(d)
		}
		n += k
	}
	return n
}

// InferArch reads the sizes of the network from a checkpoint's shapes. Head
// counts of DINO and the camera head are not stored in any shape; they are
// taken as the reference's head dims (DINO: the aggregator's head dim from
// q_norm; camera head: 128), which holds for the released and the golden
// models. Run Validate afterwards to check every tensor.
func InferArch(s Store) (Arch, error) {
	var a Arch
	var errs []error
	dim := func(key string, axis int) int {
		inf, ok := s.Info(key)
		if !ok {
			errs = append(errs, fmt.Errorf("missing %q", key))
			return 0
		}
		if axis >= len(inf.Shape) {
			errs = append(errs, fmt.Errorf("%q has shape %v, too few dimensions", key, inf.Shape))
			return 0
		}
		return inf.Shape[axis]
	}
	a.EmbedDim = dim("aggregator.camera_token", 3)
	a.Registers = dim("aggregator.register_token", 2)
	a.Depth = countIndexed(s, "aggregator.frame_blocks.", ".norm1.weight")
	headDim := dim("aggregator.frame_blocks.0.attn.q_norm.weight", 0)
	if hidden := dim("aggregator.frame_blocks.0.mlp.fc1.weight", 0); a.EmbedDim > 0 {
		a.MLPRatio = hidden / a.EmbedDim
	}
	if headDim > 0 {
		a.Heads = a.EmbedDim / headDim
		a.DINOHeads = a.EmbedDim / headDim
	}
	a.DINODepth = countIndexed(s, "aggregator.patch_embed.blocks.", ".norm1.weight")
	if n := dim("aggregator.patch_embed.pos_embed", 1) - 1; n > 0 {
		g := int(math.Round(math.Sqrt(float64(n))))
		if g*g != n {
			errs = append(errs, fmt.Errorf("aggregator.patch_embed.pos_embed holds %d positions, not a square grid", n))
		}
		a.DINOPosGrid = g
	}
	a.PatchSize = dim("aggregator.patch_embed.patch_embed.proj.weight", 2)
	a.CameraDim = dim("camera_head.token_norm.weight", 0)
	a.CameraDepth = countIndexed(s, "camera_head.trunk.", ".norm1.weight")
	a.CameraHeads = 1
	if a.CameraDim >= 128 && a.CameraDim%128 == 0 {
		a.CameraHeads = a.CameraDim / 128
	}
	a.DPTFeatures = dim("depth_head.scratch.layer1_rn.weight", 0)
	for i := range a.DPTOut {
		a.DPTOut[i] = dim(fmt.Sprintf("depth_head.projects.%d.weight", i), 0)
	}
	_, a.PointHead = s.Info("point_head.norm.weight")
	if len(errs) > 0 {
		return a, fmt.Errorf("weights: cannot read the model sizes from this checkpoint (is it a LingBot-Map checkpoint?): %w", errors.Join(errs...))
	}
	if err := a.Check(); err != nil {
		return a, fmt.Errorf("weights: the checkpoint's shapes give impossible sizes (%v): %w", a, err)
	}
	return a, nil
}

// countIndexed counts consecutive modules prefix0suffix, prefix1suffix, ...
func countIndexed(s Store, prefix, suffix string) int {
	n := 0
	for {
		if _, ok := s.Info(prefix + strconv.Itoa(n) + suffix); !ok {
			return n
		}
		n++
	}
}

// ShapeMismatch is one tensor whose shape differs from the architecture's.
type ShapeMismatch struct {
	Key        string
	Have, Want []int
}

// DTypeMismatch is one tensor stored in a dtype that cannot hold the
// model's float parameters (integer or boolean data under a float key).
type DTypeMismatch struct {
	Key, DType string
}

// MismatchError lists every difference between a checkpoint and an architecture.
type MismatchError struct {
	Arch      Arch
	Missing   []string
	Extra     []string
	Misshaped []ShapeMismatch
	WrongType []DTypeMismatch
}

func (e *MismatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "weights: checkpoint does not match the architecture (%v): %d missing, %d unexpected, %d mis-shaped tensors",
		e.Arch, len(e.Missing), len(e.Extra), len(e.Misshaped))
	if len(e.WrongType) > 0 {
		fmt.Fprintf(&b, ", %d with a non-float dtype", len(e.WrongType))
	}
	for _, k := range e.Missing {
		fmt.Fprintf(&b, "\n  missing: %s", k)
	}
	for _, k := range e.Extra {
		fmt.Fprintf(&b, "\n  unexpected: %s", k)
	}
	for _, m := range e.Misshaped {
		fmt.Fprintf(&b, "\n  mis-shaped: %s is %v, want %v", m.Key, m.Have, m.Want)
	}
	for _, m := range e.WrongType {
		fmt.Fprintf(&b, "\n  wrong dtype: %s is stored as %s (%s), want a float dtype (%s)", m.Key, m.DType, dtypeClass(m.DType), floatDTypeList)
	}
	return b.String()
}

// Validate checks that the store holds exactly the architecture's tensors
// with exactly its shapes, each in a float dtype; the error (a
// *MismatchError) names every missing, unexpected, mis-shaped and
// wrongly typed key, sorted. Every parameter of the model is a float: a
// checkpoint labelling one as integers would otherwise be converted value
// by value into garbage weights.
func Validate(s Store, a Arch) error {
	if err := a.Check(); err != nil {
		return fmt.Errorf("weights: invalid architecture: %w", err)
	}
	want := a.Shapes()
	e := &MismatchError{Arch: a}
	for _, k := range s.Keys() {
		w, ok := want[k]
		if !ok {
			e.Extra = append(e.Extra, k)
			continue
		}
		inf, _ := s.Info(k)
		if !equalShape(inf.Shape, w) {
			e.Misshaped = append(e.Misshaped, ShapeMismatch{Key: k, Have: inf.Shape, Want: w})
		}
		if !isFloatDType(inf.DType) {
			e.WrongType = append(e.WrongType, DTypeMismatch{Key: k, DType: inf.DType})
		}
	}
	for k := range want {
		if _, ok := s.Info(k); !ok {
			e.Missing = append(e.Missing, k)
		}
	}
	if len(e.Missing)+len(e.Extra)+len(e.Misshaped)+len(e.WrongType) == 0 {
		return nil
	}
	sort.Strings(e.Missing)
	sort.Strings(e.Extra)
	sort.Slice(e.Misshaped, func(i, j int) bool { return e.Misshaped[i].Key < e.Misshaped[j].Key })
	sort.Slice(e.WrongType, func(i, j int) bool { return e.WrongType[i].Key < e.WrongType[j].Key })
	return e
}

// Check infers the architecture of a checkpoint, validates every tensor
// against it (keys, shapes, dtypes) and then scans every value for NaN and
// ±Inf (ScanFinite), so that a broken file is refused before any work.
func Check(s Store) (Arch, error) {
	a, err := InferArch(s)
	if err != nil {
		return a, err
	}
	if err := Validate(s, a); err != nil {
		return a, err
	}
	return a, ScanFinite(s)
}

func equalShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
