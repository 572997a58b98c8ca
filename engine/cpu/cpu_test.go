package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

// checkClose compares with absolute + relative tolerance and reports the first misses.
func checkClose(t *testing.T, name string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	bad := 0
	for i := range got {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if d > tol*(1+math.Abs(float64(want[i]))) || math.IsNaN(float64(got[i])) {
			if bad < 5 {
				t.Errorf("%s[%d] = %g, want %g", name, i, got[i], want[i])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%s: %d of %d values off", name, bad, len(got))
	}
}

func TestLinear(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	b := New(Config{Threads: 3})
	for _, sz := range [][3]int{{1, 1, 1}, {7, 13, 5}, {33, 64, 130}, {129, 17, 3}} {
		rows, k, m := sz[0], sz[1], sz[2]
		x, w, bias := randSlice(r, rows*k), randSlice(r, m*k), randSlice(r, m)
		for _, act := range []backend.Activation{backend.ActNone, backend.ActGELU} {
			got := b.ToHost(b.Linear(b.FromHost(x, rows, k), b.FromHost(w, m, k), b.FromHost(bias, m), act))
			want := make([]float32, rows*m)
			for i := 0; i < rows; i++ {
				for j := 0; j < m; j++ {
					s := float64(bias[j])
					for q := 0; q < k; q++ {
						s += float64(x[i*k+q]) * float64(w[j*k+q])
					}
					if act == backend.ActGELU {
						s = 0.5 * s * (1 + math.Erf(s/math.Sqrt2))
					}
					want[i*m+j] = float32(s)
				}
			}
			checkClose(t, "Linear", got, want, 1e-4)
		}
		// no bias, 3-D input
		got := b.ToHost(b.Linear(b.FromHost(x, 1, rows, k), b.FromHost(w, m, k), nil, backend.ActNone))
		if got2 := b.ToHost(b.Linear(b.FromHost(x, rows, k), b.FromHost(w, m, k), b.Zeros(m), backend.ActNone)); len(got2) == len(got) {
			checkClose(t, "Linear/nobias", got, got2, 1e-6)
		}
	}
}

func TestLinearAdd(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	b := New(Config{Threads: 3})
	// {lead dims of x..., K, M}: 2-D and 3-D inputs, odd sizes.
	for _, sz := range [][]int{{1, 1, 1}, {7, 13, 5}, {37, 100, 72}, {2, 19, 33, 17}} {
		lead, k, m := sz[:len(sz)-2], sz[len(sz)-2], sz[len(sz)-1]
		rows := backend.Numel(lead)
		xs := append(append([]int(nil), lead...), k)
		outShape := append(append([]int(nil), lead...), m)
		x, w, bias, res := randSlice(r, rows*k), randSlice(r, m*k), randSlice(r, m), randSlice(r, rows*m)
		for _, withBias := range []bool{true, false} {
			var bt backend.Tensor
			if withBias {
				bt = b.FromHost(bias, m)
			}
			rt := b.FromHost(res, outShape...)
			out := b.LinearAdd(b.FromHost(x, xs...), b.FromHost(w, m, k), bt, rt)
			name := fmt.Sprintf("LinearAdd %v bias %v", sz, withBias)
			if fmt.Sprint(out.Shape()) != fmt.Sprint(outShape) {
				t.Fatalf("%s: shape %v, want %v", name, out.Shape(), outShape)
			}
			want := make([]float32, rows*m)
			for i := 0; i < rows; i++ {
				for j := 0; j < m; j++ {
					s := float64(res[i*m+j])
					if withBias {
						s += float64(bias[j])
					}
					for q := 0; q < k; q++ {
						s += float64(x[i*k+q]) * float64(w[j*k+q])
					}
					want[i*m+j] = float32(s)
				}
			}
			checkClose(t, name, b.ToHost(out), want, 1e-4)
			checkClose(t, name+" leaves r alone", b.ToHost(rt), res, 0)
		}
	}
}

func TestLayerNormAndElementwise(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	b := New(Config{})
	rows, c := 11, 37
	x, w, bias := randSlice(r, rows*c), randSlice(r, c), randSlice(r, c)
	got := b.ToHost(b.LayerNorm(b.FromHost(x, rows, c), b.FromHost(w, c), b.FromHost(bias, c), 1e-5))
	gotNA := b.ToHost(b.LayerNorm(b.FromHost(x, rows, c), nil, nil, 1e-6))
	want := make([]float32, rows*c)
	wantNA := make([]float32, rows*c)
	for i := 0; i < rows; i++ {
		var m, v float64
		for j := 0; j < c; j++ {
			m += float64(x[i*c+j])
		}
		m /= float64(c)
		for j := 0; j < c; j++ {
			v += (float64(x[i*c+j]) - m) * (float64(x[i*c+j]) - m)
		}
		v /= float64(c)
		for j := 0; j < c; j++ {
			want[i*c+j] = float32((float64(x[i*c+j])-m)/math.Sqrt(v+1e-5)*float64(w[j]) + float64(bias[j]))
			wantNA[i*c+j] = float32((float64(x[i*c+j]) - m) / math.Sqrt(v+1e-6))
		}
	}
	checkClose(t, "LayerNorm", got, want, 1e-5)
	checkClose(t, "LayerNorm/noaffine", gotNA, wantNA, 1e-5)

	xt := b.FromHost(x, rows, c)
	gt := b.FromHost(w, c)
	add := b.ToHost(b.Add(xt, gt))
	mul := b.ToHost(b.Mul(xt, gt))
	ss := b.ToHost(b.ScaleShift(xt, 2, -1))
	for i := range x {
		j := i % c
		checkClose(t, "Add", add[i:i+1], []float32{x[i] + w[j]}, 1e-6)
		checkClose(t, "Mul", mul[i:i+1], []float32{x[i] * w[j]}, 1e-6)
		checkClose(t, "ScaleShift", ss[i:i+1], []float32{2*x[i] - 1}, 1e-6)
	}
	ops := map[backend.UnaryOp]func(float64) float64{
		backend.OpGELU:   func(v float64) float64 { return 0.5 * v * (1 + math.Erf(v/math.Sqrt2)) },
		backend.OpSiLU:   func(v float64) float64 { return v / (1 + math.Exp(-v)) },
		backend.OpReLU:   func(v float64) float64 { return math.Max(v, 0) },
		backend.OpExp:    math.Exp,
		backend.OpExpP1:  func(v float64) float64 { return 1 + math.Exp(v) },
		backend.OpInvLog: func(v float64) float64 { return math.Copysign(math.Expm1(math.Abs(v)), v) },
	}
	for op, f := range ops {
		got := b.ToHost(b.Unary(op, xt))
		want := make([]float32, len(x))
		for i, v := range x {
			want[i] = float32(f(float64(v)))
		}
		checkClose(t, "Unary", got, want, 1e-6)
	}
}

func TestMovement(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	b := New(Config{})
	x := randSlice(r, 4*5*6)
	xt := b.FromHost(x, 4, 5, 6)
	sr := b.ToHost(b.SliceRows(xt, 1, 2))
	checkClose(t, "SliceRows", sr, x[30:90], 0)
	cr := b.ToHost(b.ConcatRows(b.SliceRows(xt, 0, 1), b.SliceRows(xt, 1, 3)))
	checkClose(t, "ConcatRows", cr, x, 0)
	sc := b.SliceCols(xt, 2, 3)
	scd := b.ToHost(sc)
	for rI := 0; rI < 20; rI++ {
		checkClose(t, "SliceCols", scd[rI*3:rI*3+3], x[rI*6+2:rI*6+5], 0)
	}
	cc := b.ToHost(b.ConcatCols(b.SliceCols(xt, 0, 2), sc, b.SliceCols(xt, 5, 1)))
	checkClose(t, "ConcatCols", cc, x, 0)
	tr := b.ToHost(b.Transpose(xt))
	for bi := 0; bi < 4; bi++ {
		for i := 0; i < 5; i++ {
			for j := 0; j < 6; j++ {
				if tr[bi*30+j*5+i] != x[bi*30+i*6+j] {
					t.Fatalf("Transpose[%d,%d,%d]", bi, i, j)
				}
			}
		}
	}
}

func TestRoPE(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	b := New(Config{})
	n, h, d := 5, 3, 16
	x := randSlice(r, 2*n*h*d)
	cs, sn := make([]float32, n*d/2), make([]float32, n*d/2)
	for i := range cs {
		a := r.Float64() * 6
		cs[i], sn[i] = float32(math.Cos(a)), float32(math.Sin(a))
	}
	for _, pairing := range []backend.RoPEPairing{backend.RoPEInterleaved, backend.RoPEHalves2D} {
		got := b.ToHost(b.RoPE(b.FromHost(x, 2, n, h, d), b.FromHost(cs, n, d/2), b.FromHost(sn, n, d/2), pairing))
		want := make([]float32, len(x))
		for bi := 0; bi < 2; bi++ {
			for tok := 0; tok < n; tok++ {
				for hd := 0; hd < h; hd++ {
					base := ((bi*n+tok)*h + hd) * d
					for m := 0; m < d/2; m++ {
						var i, j int
						if pairing == backend.RoPEInterleaved {
							i, j = 2*m, 2*m+1
						} else {
							half, q := m/(d/4), m%(d/4)
							i, j = half*d/2+q, half*d/2+q+d/4
						}
						c, s := float64(cs[tok*d/2+m]), float64(sn[tok*d/2+m])
						want[base+i] = float32(float64(x[base+i])*c - float64(x[base+j])*s)
						want[base+j] = float32(float64(x[base+j])*c + float64(x[base+i])*s)
					}
				}
			}
		}
		checkClose(t, "RoPE", got, want, 1e-5)
	}
}

// naiveAttention over explicit key rows.
func naiveAttention(q, k, v []float32, nq, nk, h, d int, scale float64) []float32 {
	out := make([]float32, nq*h*d)
	for hd := 0; hd < h; hd++ {
		for i := 0; i < nq; i++ {
			s := make([]float64, nk)
			m := math.Inf(-1)
			for j := 0; j < nk; j++ {
				var a float64
				for t := 0; t < d; t++ {
					a += float64(q[(i*h+hd)*d+t]) * float64(k[(j*h+hd)*d+t])
				}
				s[j] = a * scale
				m = math.Max(m, s[j])
			}
			var z float64
			for j := range s {
				s[j] = math.Exp(s[j] - m)
				z += s[j]
			}
			for t := 0; t < d; t++ {
				var a float64
				for j := 0; j < nk; j++ {
					a += s[j] * float64(v[(j*h+hd)*d+t])
				}
				out[(i*h+hd)*d+t] = float32(a / z)
			}
		}
	}
	return out
}

func TestAttentionDenseAndPaged(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	b := New(Config{Threads: 2})
	h, d := 2, 8
	for _, c := range []struct{ nq, pageSize, pages, last int }{
		{1, 7, 3, 2}, {70, 15, 5, 15}, {13, 999, 2, 6}, {65, 3, 40, 1},
	} {
		nk := c.pageSize*(c.pages-1) + c.last
		q, k, v := randSlice(r, c.nq*h*d), randSlice(r, nk*h*d), randSlice(r, nk*h*d)
		want := naiveAttention(q, k, v, c.nq, nk, h, d, 0.3)
		got := b.ToHost(b.Attention(b.FromHost(q, 1, c.nq, h, d), b.FromHost(k, 1, nk, h, d), b.FromHost(v, 1, nk, h, d), 0.3))
		checkClose(t, "Attention", got, want, 2e-5)

		// Scatter the keys over pages in a shuffled order, then read them back in key order.
		total := c.pages + 3
		st, err := b.NewKVStore(backend.KVSpec{Layers: 2, Pages: total, PageSize: c.pageSize, Heads: h, HeadDim: d})
		if err != nil {
			t.Fatal(err)
		}
		perm := r.Perm(total)[:c.pages]
		table := make([]int32, c.pages)
		kt, vt := b.FromHost(k, nk, h, d), b.FromHost(v, nk, h, d)
		for i, p := range perm {
			table[i] = int32(p)
			n := c.pageSize
			if i == c.pages-1 {
				n = c.last
			}
			b.WriteKV(st, 1, p, 0, kt, vt, i*c.pageSize, n)
		}
		got = b.ToHost(b.PagedAttention(b.FromHost(q, c.nq, h, d), st, 1, table, c.last, 0.3))
		checkClose(t, "PagedAttention", got, want, 2e-5)
	}
	// batched dense attention: each batch sees only its own keys.
	q, k, v := randSlice(r, 2*5*h*d), randSlice(r, 2*9*h*d), randSlice(r, 2*9*h*d)
	got := b.ToHost(b.Attention(b.FromHost(q, 2, 5, h, d), b.FromHost(k, 2, 9, h, d), b.FromHost(v, 2, 9, h, d), 0.125))
	for bi := 0; bi < 2; bi++ {
		want := naiveAttention(q[bi*5*h*d:(bi+1)*5*h*d], k[bi*9*h*d:(bi+1)*9*h*d], v[bi*9*h*d:(bi+1)*9*h*d], 5, 9, h, d, 0.125)
		checkClose(t, "Attention/batch", got[bi*5*h*d:(bi+1)*5*h*d], want, 2e-5)
	}
}

func TestConvolutions(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	b := New(Config{})
	for _, c := range []struct{ n, ci, h, w, o, k, stride, pad int }{
		{1, 3, 7, 9, 4, 3, 1, 1}, {2, 5, 8, 6, 3, 3, 2, 1}, {1, 4, 5, 5, 6, 1, 1, 0}, {1, 3, 28, 42, 8, 14, 14, 0},
	} {
		x, w, bias := randSlice(r, c.n*c.ci*c.h*c.w), randSlice(r, c.o*c.ci*c.k*c.k), randSlice(r, c.o)
		got := b.Conv2D(b.FromHost(x, c.n, c.ci, c.h, c.w), b.FromHost(w, c.o, c.ci, c.k, c.k), b.FromHost(bias, c.o), c.stride, c.pad)
		ho, wo := got.Shape()[2], got.Shape()[3]
		want := make([]float32, c.n*c.o*ho*wo)
		for n := 0; n < c.n; n++ {
			for o := 0; o < c.o; o++ {
				for y := 0; y < ho; y++ {
					for xx := 0; xx < wo; xx++ {
						s := float64(bias[o])
						for ci := 0; ci < c.ci; ci++ {
							for ky := 0; ky < c.k; ky++ {
								for kx := 0; kx < c.k; kx++ {
									iy, ix := y*c.stride-c.pad+ky, xx*c.stride-c.pad+kx
									if iy >= 0 && iy < c.h && ix >= 0 && ix < c.w {
										s += float64(x[((n*c.ci+ci)*c.h+iy)*c.w+ix]) * float64(w[((o*c.ci+ci)*c.k+ky)*c.k+kx])
									}
								}
							}
						}
						want[((n*c.o+o)*ho+y)*wo+xx] = float32(s)
					}
				}
			}
		}
		checkClose(t, "Conv2D", b.ToHost(got), want, 1e-4)
	}
	for _, k := range []int{2, 4} {
		n, ci, h, w, o := 2, 3, 3, 5, 4
		x, wt, bias := randSlice(r, n*ci*h*w), randSlice(r, ci*o*k*k), randSlice(r, o)
		got := b.ToHost(b.ConvTranspose2D(b.FromHost(x, n, ci, h, w), b.FromHost(wt, ci, o, k, k), b.FromHost(bias, o), k))
		want := make([]float32, n*o*h*k*w*k)
		for ni := 0; ni < n; ni++ {
			for oc := 0; oc < o; oc++ {
				for y := 0; y < h*k; y++ {
					for xx := 0; xx < w*k; xx++ {
						s := float64(bias[oc])
						for c := 0; c < ci; c++ {
							s += float64(x[((ni*ci+c)*h+y/k)*w+xx/k]) * float64(wt[((c*o+oc)*k+y%k)*k+xx%k])
						}
						want[((ni*o+oc)*h*k+y)*w*k+xx] = float32(s)
					}
				}
			}
		}
		checkClose(t, "ConvTranspose2D", got, want, 1e-5)
	}
}

func TestResizeBilinear(t *testing.T) {
	b := New(Config{})
	// 1×1×2×3 → 3×5 with align_corners: corners preserved, midpoints averaged.
	x := []float32{0, 1, 2, 10, 11, 12}
	got := b.ToHost(b.ResizeBilinear(b.FromHost(x, 1, 1, 2, 3), 3, 5, true))
	want := []float32{0, 0.5, 1, 1.5, 2, 5, 5.5, 6, 6.5, 7, 10, 10.5, 11, 11.5, 12}
	checkClose(t, "ResizeBilinear/align", got, want, 1e-6)
	// align_corners=false, ×2: PyTorch gives [0, .25, .75, 1] on a row [0,1].
	got = b.ToHost(b.ResizeBilinear(b.FromHost([]float32{0, 1}, 1, 1, 1, 2), 1, 4, false))
	checkClose(t, "ResizeBilinear/half", got, []float32{0, 0.25, 0.75, 1}, 1e-6)
}

func TestFreeRecycles(t *testing.T) {
	b := New(Config{Threads: 1})
	x := b.FromHost(make([]float32, 64), 8, 8)
	b.Free(b.Add(x, x))
	allocs := testing.AllocsPerRun(20, func() {
		y := b.Add(x, x)
		b.Free(y)
	})
	// the result header and shape slice are small; the 64-float buffer is reused
	if allocs > 4 {
		t.Fatalf("Add+Free allocates %v times per call", allocs)
	}
}

func BenchmarkLinear(b *testing.B) {
	be := New(Config{})
	r := rand.New(rand.NewPCG(1, 1))
	for _, s := range [][3]int{{1005, 1024, 3072}, {1005, 1024, 4096}, {1005, 4096, 1024}} {
		m, k, n := s[0], s[1], s[2]
		x := be.FromHost(randSlice(r, m*k), m, k)
		w := be.FromHost(randSlice(r, n*k), n, k)
		bias := be.FromHost(randSlice(r, n), n)
		b.Run("", func(b *testing.B) {
			for b.Loop() {
				be.Free(be.Linear(x, w, bias, backend.ActNone))
			}
			b.ReportMetric(2*float64(m*k*n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// AppendRows gives ConcatRows' values row after row, in the storage it made
// while that has room (a handful of storages for 100 rows), and never in
// storage it did not make: x's spare capacity may belong to someone else.
func TestAppendRows(t *testing.T) {
	b := New(Config{})
	row := func(v float32) backend.Tensor { return b.FromHost([]float32{v, v + 0.5, v + 0.25}, 1, 3) }
	acc := row(0)
	want := []float32{0, 0.5, 0.25}
	stores := 0
	for i := 1; i < 100; i++ {
		before := &ct(acc).data[0]
		acc = b.AppendRows(acc, row(float32(i)))
		want = append(want, float32(i), float32(i)+0.5, float32(i)+0.25)
		if &ct(acc).data[0] != before {
			stores++
		}
	}
	if got := b.ToHost(acc); !slices.Equal(got, want) || !slices.Equal(acc.Shape(), []int{100, 3}) {
		t.Fatalf("AppendRows: shape %v, values differ from the rows appended", acc.Shape())
	}
	if stores > 8 {
		t.Errorf("%d storages for 100 rows appended one at a time", stores)
	}
	// a tensor whose slice has spare capacity AppendRows did not make
	big := make([]float32, 6, 12)
	x := &Tensor{data: big[:3], shape: []int{1, 3}}
	y := b.AppendRows(x, row(7))
	if &ct(y).data[0] == &big[0] || big[3] != 0 {
		t.Error("AppendRows wrote into capacity it did not make")
	}
	if x.data != nil {
		t.Error("AppendRows left x usable")
	}
}
