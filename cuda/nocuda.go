//go:build !cuda

package cuda

// New reports that CUDA support is not compiled in.
func New(Config) (Backend, error) { return nil, ErrNotBuilt }
