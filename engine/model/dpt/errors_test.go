package dpt

import (
	"math"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/cpu"
	"github.com/lingbotmap/lingbotmap/engine/golden/goldentest"
	"github.com/lingbotmap/lingbotmap/engine/weights"
)

// hidingStore is a weights.Store without some keys.
type hidingStore struct {
	weights.Store
	hide string
}

func (h hidingStore) Keys() []string {
	var ks []string
	for _, k := range h.Store.Keys() {
		if k != h.hide {
			ks = append(ks, k)
		}
	}
	return ks
}

func (h hidingStore) Info(name string) (weights.Info, bool) {
	if name == h.hide {
		return weights.Info{}, false
	}
	return h.Store.Info(name)
}

func TestLoadNamesMissingTensor(t *testing.T) {
	ws := goldentest.Open(t, "weights.safetensors")
	for _, key := range []string{
		"depth_head.norm.weight",
		"depth_head.scratch.refinenet2.resConfUnit1.conv2.bias",
		"depth_head.scratch.output_conv2.2.weight",
		"depth_head.resize_layers.3.weight",
	} {
		_, err := Load(cpu.New(cpu.Config{Threads: 1}), weights.NewCursor(hidingStore{ws, key}).Sub("depth_head"))
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("without %s: error %v, want one naming the key", key, err)
		}
	}
}

func TestForwardRejectsBadInput(t *testing.T) {
	be := cpu.New(cpu.Config{Threads: 1})
	h, err := Load(be, weights.NewCursor(goldentest.Open(t, "weights.safetensors")).Sub("depth_head"))
	if err != nil {
		t.Fatal(err)
	}
	ok := func() []backend.Tensor {
		var ls []backend.Tensor
		for range 4 {
			ls = append(ls, be.Zeros(2, 21, 256))
		}
		return ls
	}
	cases := map[string]func() ([]backend.Tensor, int, int){
		"three layers":        func() ([]backend.Tensor, int, int) { return ok()[:3], 3, 5 },
		"wrong grid":          func() ([]backend.Tensor, int, int) { return ok(), 4, 5 },
		"wrong width":         func() ([]backend.Tensor, int, int) { l := ok(); l[2] = be.Zeros(2, 21, 128); return l, 3, 5 },
		"frame count differs": func() ([]backend.Tensor, int, int) { l := ok(); l[1] = be.Zeros(3, 21, 256); return l, 3, 5 },
		"nil layer":           func() ([]backend.Tensor, int, int) { l := ok(); l[3] = nil; return l, 3, 5 },
	}
	for name, c := range cases {
		ls, gh, gw := c()
		if _, err := h.Forward(be, ls, 6, gh, gw, 42, 70); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := h.Forward(be, ok(), 6, 3, 5, 42, 70); err != nil {
		t.Errorf("valid input rejected: %v", err)
	}
}

// TestForwardFramesIndependent: frames do not interact, so running a subset
// gives the same rows as the 16-frame run, though the two cut their frames
// into chunks at different places.
func TestForwardFramesIndependent(t *testing.T) {
	be := cpu.New(cpu.Config{})
	h, err := Load(be, weights.NewCursor(goldentest.Open(t, "weights.safetensors")).Sub("depth_head"))
	if err != nil {
		t.Fatal(err)
	}
	im := goldentest.Open(t, "stream_kf1", "intermediates.safetensors")
	var all, sub []backend.Tensor
	for _, k := range []string{"agg_layer00", "agg_layer02", "agg_layer03", "agg_layer04"} {
		x := be.FromHost(read(t, im, k), 16, 21, 256)
		all = append(all, x)
		sub = append(sub, be.SliceRows(x, 7, 3)) // frames 7–9: in chunks {6, 7}, {8, 9} of the full run, {7, 8}, {9} alone
	}
	a, err := h.Forward(be, all, 6, 3, 5, 42, 70)
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.Forward(be, sub, 6, 3, 5, 42, 70)
	if err != nil {
		t.Fatal(err)
	}
	plane := 2 * 42 * 70
	ad, bd := be.ToHost(a)[7*plane:10*plane], be.ToHost(b)
	for i := range bd {
		if math.Abs(float64(ad[i]-bd[i])) > 1e-6*math.Max(1, math.Abs(float64(ad[i]))) {
			t.Fatalf("value %d: %g alone, %g in the full run", i, bd[i], ad[i])
		}
	}
}

// TestPosEmbed checks the table against the formula written out directly.
func TestPosEmbed(t *testing.T) {
	const c, gh, gw, imgH, imgW = 8, 3, 4, 42, 70
	pe := PosEmbed(c, gh, gw, imgH, imgW, 0.1)
	a := float64(imgW) / imgH
	sx, sy := a/math.Sqrt(a*a+1), 1/math.Sqrt(a*a+1)
	for i := range gh {
		for j := range gw {
			x := -sx*(gw-1)/gw + float64(j)*2*sx*(gw-1)/gw/(gw-1)
			y := -sy*(gh-1)/gh + float64(i)*2*sy*(gh-1)/gh/(gh-1)
			for k := range c / 4 {
				w := math.Pow(100, -float64(k)/(c/4))
				want := []float64{math.Sin(x * w), math.Cos(x * w), math.Sin(y * w), math.Cos(y * w)}
				for part, v := range want {
					got := pe[((part*c/4+k)*gh+i)*gw+j]
					if math.Abs(float64(got)-0.1*v) > 1e-7 {
						t.Fatalf("channel %d at (%d,%d): %g, want %g", part*c/4+k, i, j, got, 0.1*v)
					}
				}
			}
		}
	}
}
