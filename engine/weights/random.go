package weights

import (
	"hash/fnv"
	"math"
	"runtime"
	"sort"
	"sync"
)

// Random builds a checkpoint of the architecture with random weights that
// keep activations in a sane range (the scheme of tools/make_golden.py):
// fan-in-scaled normals for Linear/Conv weights, LayerNorm weights 1+0.1·N
// and biases 0.05·N, other biases 0.05·N, LayerScale γ ~ U[0.1, 0.3],
// tokens and position tables 0.5·N, and a camera pose_branch.fc2 scaled down
// (FoV rows further) with biases putting quaternion w and both FoVs at 0.35,
// so the predicted FoV stays positive. The same arch and seed always give
// the same bits (each tensor has its own stream derived from seed and name,
// so generation order does not matter).
//
// An arch that fails Arch.Check gives an empty store (which Validate and
// InferArch then reject with a clear message).
func Random(arch Arch, seed int64) *MemStore {
	m := NewMemStore()
	if arch.Check() != nil {
		return m
	}
	ps := arch.params()
	data := make([][]float32, len(ps))
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				data[i] = randomTensor(ps[i], seed)
			}
		}()
	}
	for i := range ps {
		next <- i
	}
	close(next)
	wg.Wait()

	for i, p := range ps { // names are unique and shapes match by construction
		m.tensors[p.name] = memTensor{shape: p.shape, data: data[i]}
		m.keys = append(m.keys, p.name)
	}
	sort.Strings(m.keys)
	if fc2 := m.tensors["camera_head.pose_branch.fc2.weight"]; fc2.data != nil {
		in := len(fc2.data) / 9
		for row := 0; row < 9; row++ {
			s := float32(0.3)
			if row >= 7 { // FoV rows: keep the accumulated pre-activation well above 0
				s *= 0.25
			}
			for j := range in {
				fc2.data[row*in+j] *= s
			}
		}
	}
	if b := m.tensors["camera_head.pose_branch.fc2.bias"]; len(b.data) == 9 {
		clear(b.data)
		b.data[6], b.data[7], b.data[8] = 0.35, 0.35, 0.35 // quat w (scalar last), fov_h, fov_w
	}
	return m
}

func randomTensor(p param, seed int64) []float32 {
	n := 1
	for _, d := range p.shape {
		n *= d
	}
	h := fnv.New64a()
	h.Write([]byte(p.name))
	r := newRNG(uint64(seed) ^ h.Sum64())
	out := make([]float32, n)
	switch p.kind {
	case kindGamma:
		for i := range out {
			out[i] = float32(0.1 + 0.2*r.uniform())
		}
		return out
	case kindNormW:
		r.fillNormal(out, 1, 0.1)
	case kindNormB, kindBias:
		r.fillNormal(out, 0, 0.05)
	case kindToken:
		r.fillNormal(out, 0, 0.5)
	case kindConvT:
		r.fillNormal(out, 0, 1/math.Sqrt(float64(p.shape[0])))
	case kindLinear:
		fanIn := 1
		for _, d := range p.shape[1:] {
			fanIn *= d
		}
		r.fillNormal(out, 0, 1/math.Sqrt(float64(fanIn)))
	}
	return out
}

// rng is splitmix64: tiny, fast and fully specified here, so random
// checkpoints do not change with the Go release.
type rng struct{ s uint64 }

func newRNG(seed uint64) *rng {
	r := &rng{s: seed}
	r.next() // decorrelate nearby seeds
	return r
}

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// uniform is in [0, 1).
func (r *rng) uniform() float64 { return float64(r.next()>>11) / (1 << 53) }

// fillNormal fills out with mean + std·N(0,1) (Box–Muller, two values per draw).
func (r *rng) fillNormal(out []float32, mean, std float64) {
	for i := 0; i < len(out); i += 2 {
		u1 := 1 - r.uniform() // (0, 1]: log is finite
		u2 := r.uniform()
		rad := math.Sqrt(-2 * math.Log(u1))
		s, c := math.Sincos(2 * math.Pi * u2)
		out[i] = float32(mean + std*rad*c)
		if i+1 < len(out) {
			out[i+1] = float32(mean + std*rad*s)
		}
	}
}
