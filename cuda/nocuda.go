//go:build !cuda

package cuda

import "errors"

// ErrNotBuilt is returned by New in binaries built without the cuda tag.
var ErrNotBuilt = errors.New("this binary was built without CUDA support; rebuild with -tags cuda")

// New reports that CUDA support is not compiled in.
func New(Config) (Backend, error) { return nil, ErrNotBuilt }
