package model

import "math"

// DINOv2's position table was trained for a square grid; other resolutions
// resample it with PyTorch's antialiased bicubic interpolation
// (F.interpolate(mode="bicubic", antialias=True)), which is PIL's separable
// filter: Keys cubic with a = −0.5, support widened by the downscale factor.
// It is computed once per resolution on the host, in float64.

// cubicAA is the Keys cubic convolution kernel with a = −0.5.
func cubicAA(x float64) float64 {
	const a = -0.5
	x = math.Abs(x)
	switch {
	case x < 1:
		return ((a+2)*x-(a+3))*x*x + 1
	case x < 2:
		return (((x-5)*x+8)*x - 4) * a
	}
	return 0
}

// aaWeights returns, for each of out output positions, the first input index
// and the normalised filter weights over in input positions.
func aaWeights(in, out int) (first []int, w [][]float64) {
	scale := float64(in) / float64(out)
	fs := math.Max(scale, 1)
	support := 2 * fs
	first = make([]int, out)
	w = make([][]float64, out)
	for i := 0; i < out; i++ {
		c := (float64(i) + 0.5) * scale
		lo := int(math.Floor(c - support + 0.5))
		hi := int(math.Floor(c + support + 0.5))
		lo = max(lo, 0)
		hi = min(hi, in)
		ws := make([]float64, 0, hi-lo)
		var sum float64
		for j := lo; j < hi; j++ {
			v := cubicAA((float64(j) - c + 0.5) / fs)
			ws = append(ws, v)
			sum += v
		}
		if sum != 0 {
			for k := range ws {
				ws[k] /= sum
			}
		}
		first[i], w[i] = lo, ws
	}
	return first, w
}

// resizeBicubicAA resamples a channels-last grid src [inH, inW, C] to
// [outH, outW, C] with the antialiased bicubic filter.
func resizeBicubicAA(src []float32, inH, inW, c, outH, outW int) []float32 {
	// Columns first, then rows, like PIL and PyTorch's separable pass.
	cf, cw := aaWeights(inW, outW)
	tmp := make([]float64, inH*outW*c)
	for y := 0; y < inH; y++ {
		for x := 0; x < outW; x++ {
			dst := tmp[(y*outW+x)*c : (y*outW+x+1)*c]
			for k, wt := range cw[x] {
				s := src[(y*inW+cf[x]+k)*c : (y*inW+cf[x]+k+1)*c]
				for ch := range dst {
					dst[ch] += wt * float64(s[ch])
				}
			}
		}
	}
	rf, rw := aaWeights(inH, outH)
	out := make([]float32, outH*outW*c)
	acc := make([]float64, c)
	for y := 0; y < outH; y++ {
		for x := 0; x < outW; x++ {
			clear(acc)
			for k, wt := range rw[y] {
				s := tmp[((rf[y]+k)*outW+x)*c : ((rf[y]+k)*outW+x+1)*c]
				for ch := range acc {
					acc[ch] += wt * s[ch]
				}
			}
			dst := out[(y*outW+x)*c : (y*outW+x+1)*c]
			for ch := range dst {
				dst[ch] = float32(acc[ch])
			}
		}
	}
	return out
}
