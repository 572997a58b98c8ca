package model

import (
	"context"
	"encoding/json"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine/cpu"
	"github.com/lingbotmap/lingbotmap/engine/weights"
	"github.com/lingbotmap/lingbotmap/internal/shared/sharedtest"
)

// randomStore is a checkpoint of the given shapes with random values drawn
// per tensor (deterministic in the name): LayerNorm weights 1, biases and
// gammas small, matrices uniform ±1/√fan_in, so activations stay finite.
type randomStore struct {
	shapes map[string][]int
	keys   []string
}

func newRandomStore(shapes map[string][]int) *randomStore {
	s := &randomStore{shapes: shapes}
	for k := range shapes {
		s.keys = append(s.keys, k)
	}
	slices.Sort(s.keys)
	return s
}

func (s *randomStore) Keys() []string { return s.keys }
func (s *randomStore) Close() error   { return nil }

func (s *randomStore) Info(name string) (weights.Info, bool) {
	sh, ok := s.shapes[name]
	return weights.Info{DType: "F32", Shape: sh}, ok
}

func (s *randomStore) Float32(name string) ([]float32, error) {
	sh := s.shapes[name]
	n := 1
	for _, d := range sh {
		n *= d
	}
	out := make([]float32, n)
	last := name[strings.LastIndex(name, ".")+1:]
	isNorm := strings.Contains(name, "norm") && !strings.Contains(name, "qkv")
	switch {
	case isNorm && last == "weight":
		for i := range out {
			out[i] = 1
		}
		return out, nil
	case isNorm && last == "bias":
		return out, nil
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	r := rand.New(rand.NewPCG(h.Sum64(), 1))
	bound := float32(0.02)
	switch {
	case last == "gamma":
		bound = 0.1
	case last == "weight" && len(sh) >= 2:
		fanIn := n / sh[0]
		bound = float32(1 / math.Sqrt(float64(fanIn)))
	}
	for i := range out {
		out[i] = (2*r.Float32() - 1) * bound
	}
	return out, nil
}

// BenchmarkFullFrame times one frame of the full-size model (E=1024, 24+24
// blocks, DINO ViT-L/14, camera head, DPT head once it exists) at 518×294 with
// random weights on the CPU backend. The frame runs on an empty cache, so its
// global attention sees only itself: this is the per-frame cost without the
// cache-size-dependent attention. It needs about 6 GB of memory and minutes:
//
//	go test ./engine/model -run '^$' -bench FullFrame -benchtime 1x -timeout 60m
func BenchmarkFullFrame(b *testing.B) {
	raw, err := os.ReadFile(sharedtest.Path(b, "golden", "full_state_dict_shapes.json"))
	if err != nil {
		b.Fatal(err)
	}
	var shapes map[string][]int
	if err := json.Unmarshal(raw, &shapes); err != nil {
		b.Fatalf("full_state_dict_shapes.json: %v", err)
	}
	start := time.Now()
	mdl, err := Load(cpu.New(cpu.Config{}), newRandomStore(shapes), Options{ScaleFrames: 1, SlidingWindow: 1, MaxFrames: 8, CacheHeadroom: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer mdl.Close()
	b.Logf("loaded the random full model in %v: %+v", time.Since(start).Round(time.Millisecond), mdl.Sizes())

	const h, w = 294, 518
	r := rand.New(rand.NewPCG(1, 2))
	img := make([]float32, 3*h*w)
	for i := range img {
		img[i] = r.Float32()
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		mdl.Reset()
		t0 := time.Now()
		out, err := mdl.Forward(ctx, [][]float32{img}, h, w, Step{})
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("one frame %d×%d: %v, pose %v", w, h, time.Since(t0).Round(time.Millisecond), out.PoseEnc[0])
	}
}
