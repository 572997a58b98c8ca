//go:build nvrtc

package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestKernelTraceBuilds compiles the GPU machine's kernel tracer
// (scripts/kerneltrace.c, run.sh's ktrace stage) as that stage does, against
// the CUPTI and CUDA headers test/install-cuda-tools.sh unpacks (CUDA 11.8's;
// the GPU machine has 13's), with warnings as errors. A folder that declares
// no activity records is refused.
func TestKernelTraceBuilds(t *testing.T) {
	tools := os.Getenv("LINGBOTMAP_CUDA_TOOLS")
	if tools == "" {
		tools = "/opt/lingbotmap/cuda"
	}
	build := func(inc string) (string, error) {
		cmd := exec.Command("bash", filepath.Join("scripts", "kerneltrace-build.sh"), inc)
		cmd.Env = append(os.Environ(), "CUDA_INCLUDE="+filepath.Join(tools, "include"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := build(filepath.Join(tools, "cupti", "include"))
	if err != nil {
		t.Fatalf("kerneltrace.c does not build against %s (test/install-cuda-tools.sh puts CUPTI's headers there): %v\n%s", tools, err, out)
	}
	if !regexp.MustCompile(`^Kernel[0-9]+ Memcpy[0-9]+ Memset[0-9]+\n$`).MatchString(out) {
		t.Errorf("record layouts: %q", out)
	}
	empty := t.TempDir()
	if err := os.WriteFile(filepath.Join(empty, "cupti.h"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := build(empty); err == nil || !strings.Contains(out, "no activity records") {
		t.Errorf("headers without records: err %v, output %q", err, out)
	}
}
