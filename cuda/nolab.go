//go:build !cudadev

package cuda

// labPagedKernels: a build without the cudadev tag has no lab variants.
func labPagedKernels() []string { return nil }
