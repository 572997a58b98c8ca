//go:build !cuda

package main

import (
	"errors"
	"testing"

	"github.com/lingbotmap/lingbotmap/cuda"
	"github.com/lingbotmap/lingbotmap/engine"
)

// TestBackendFactoryWithoutCUDA: a binary built without the cuda tag
// answers the cuda device with cuda.ErrNotBuilt, wrapped with the device.
func TestBackendFactoryWithoutCUDA(t *testing.T) {
	cfg := engine.DefaultConfig()
	cfg.Device = "cuda"
	_, err := backendFactory(nil)(cfg)
	if !errors.Is(err, cuda.ErrNotBuilt) || err.Error() != "device cuda: "+cuda.ErrNotBuilt.Error() {
		t.Fatalf("error %v, want device cuda: %v", err, cuda.ErrNotBuilt)
	}
}
