package engine

import (
	"strings"
	"testing"
)

// TestConfigValidateCUDA: every compile target of the cuda section is taken
// and the default is auto; an unknown one is refused naming the key and
// the values it takes.
func TestConfigValidateCUDA(t *testing.T) {
	if got := DefaultConfig().CUDA.Arch; got != "auto" {
		t.Fatalf("default cuda.arch %q, want auto", got)
	}
	for _, a := range CUDAArches {
		cfg := DefaultConfig()
		cfg.CUDA.Arch = a
		if err := cfg.Validate(); err != nil {
			t.Errorf("cuda.arch %q: %v", a, err)
		}
	}
	for _, a := range []string{"", "sm_75", "compute_80", "sm_100"} {
		cfg := DefaultConfig()
		cfg.CUDA.Arch = a
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "'cuda.arch'") || !strings.Contains(err.Error(), "sm_80") {
			t.Errorf("cuda.arch %q: error %v, want one naming 'cuda.arch' and its values", a, err)
		}
	}
}
