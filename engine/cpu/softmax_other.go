//go:build !amd64

package cpu

// softmaxKernels: no vector kernels on this architecture.
func softmaxKernels() []softmaxKernel { return nil }

// rowMaxVec has no assembly on this architecture: it does nothing and rowMax
// runs the Go loop.
func rowMaxVec(x []float32) (m float32, done int) { return 0, 0 }

// expSubSumVec has no assembly on this architecture: it does nothing and
// expSubSum runs expSubSumGo.
func expSubSumVec(x []float32, m float32) (sum float64, done int) { return 0, 0 }
