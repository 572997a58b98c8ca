//go:build !amd64

package cpu

// sgemmFast has no assembly kernel on this architecture: it reports false and
// sgemm uses gonum's Sgemm.
func sgemmFast(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) bool {
	return false
}

// interleave8 is interleave for eight rows, in Go here.
func interleave8(dst []float32, stride int, src []float32, ld, kc int) {
	interleave8Go(dst, stride, src, ld, 0, kc)
}
