package cuda

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// kernelTrace writes a record in kerneltrace.c's format with a known answer:
// frames of an encoder (20 GEMMs, 2 µs apart), 24 layers of paged attention
// (800 µs) whose PDL dependent starts 100 µs into it and ends 20 µs after
// it, then a LayerNorm after 3 µs, a copy after 10 µs and 700 µs of host time
// (702 µs with the first GEMM's 2) before the next frame. stall adds that
// much host time after layer 10 of frame stallAt; frame oddAt launches 10
// paged kernels more (1 µs each, inside the others); extra ends the record;
// the last frame stops after 5 layers (the record's end).
func kernelTrace(t *testing.T, frames, stallAt int, stall int64, oddAt int, extra string) string {
	t.Helper()
	var b strings.Builder
	now := int64(1_000_000)
	k := func(start, d int64, name string) { fmt.Fprintf(&b, "K %d %d %s\n", start, start+d, name) }
	for f := 0; f < frames; f++ {
		for range 20 {
			now += 2_000
			k(now, 50_000, "sm90_xmma_gemm_bf16bf16_bf16f32")
			now += 50_000
		}
		layers := 24
		if f == frames-1 {
			layers = 5
		}
		for l := 0; l < layers; l++ {
			k(now, 800_000, "attn_f8_paged")
			if f == oddAt && l < 10 {
				k(now+1_000, 1_000, "attn_f8_paged")
			}
			k(now+100_000, 720_000, "attn_combine")
			now += 820_000 + 3_000
			k(now, 100_000, "layernorm_w1024")
			now += 100_000
			if f == stallAt && l == 10 {
				now += stall
			}
		}
		now += 10_000
		fmt.Fprintf(&b, "C %d %d 783216\n", now, now+30_000)
		now += 30_000 + 700_000
	}
	b.WriteString(extra)
	path := filepath.Join(t.TempDir(), "ktrace.txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func runKernelTrace(t *testing.T, trace string, args ...string) (string, error) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("kerneltrace.py needs python3:", err)
	}
	out, err := exec.Command(py, append([]string{filepath.Join("scripts", "kerneltrace.py"), trace}, args...)...).CombinedOutput()
	return string(out), err
}

func msFigure(t *testing.T, out, pattern string) float64 {
	t.Helper()
	m := regexp.MustCompile(pattern).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %q in:\n%s", pattern, out)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestKernelTraceAnalysis checks run.sh's ktrace figures on a record whose
// busy and idle time are known by construction: per frame 23.11 ms busy and
// 0.822 ms idle, and 5 ms more idle in the frame a host stall splits.
func TestKernelTraceAnalysis(t *testing.T) {
	// Frames 48–67 are counted (68 ends them; 69 is cut short); frame 60
	// stalls.
	t.Run("whole", func(t *testing.T) {
		out := analyseTrace(t, kernelTrace(t, 70, 60, 5_000_000, -1, ""))
		if strings.Contains(out, "left out") {
			t.Errorf("a frame was left out of a whole record:\n%s", out)
		}
	})
	// --gaps lists the longest gaps with their frames: the stall first (frame
	// 60 is the 13th counted), then the host's turns between frames.
	t.Run("longest gaps", func(t *testing.T) {
		out, err := runKernelTrace(t, kernelTrace(t, 70, 60, 5_000_000, -1, ""), "--frames", "20", "--within", "30", "--label", "gaps", "--gaps", "3")
		if err != nil {
			t.Fatalf("kerneltrace.py: %v\n%s", err, out)
		}
		m := regexp.MustCompile(`(?m)^ +([0-9.]+) +(\d+)/20 +(.+?) → (.+)$`).FindAllStringSubmatch(out, -1)
		if len(m) != 3 || m[0][1] != "5.000" || m[0][2] != "13" || m[0][3] != "layernorm_w1024" || m[0][4] != "attn_f8_paged" ||
			m[1][1] != "0.702" || m[2][1] != "0.702" {
			t.Errorf("longest gaps %q, want the 5 ms stall in frame 13 (layernorm_w1024 → attn_f8_paged), then two of 0.702 ms:\n%s", m, out)
		}
	})
	// Frame 62 launches 10 paged kernels more (another kind of frame):
	// frames 41–60 are counted, the last run of 20 regular ones.
	t.Run("irregular", func(t *testing.T) {
		out := analyseTrace(t, kernelTrace(t, 70, 55, 5_000_000, 62, ""))
		if !strings.Contains(out, "1 frames of the last 30 left out for their paged launches ([34], a frame has 24)") {
			t.Errorf("no note of the frame left out:\n%s", out)
		}
	})
}

func analyseTrace(t *testing.T, trace string) string {
	t.Helper()
	out, err := runKernelTrace(t, trace, "--frames", "20", "--within", "30", "--label", "synthetic")
	if err != nil {
		t.Fatalf("kerneltrace.py: %v\n%s", err, out)
	}
	t.Log(out)
	for _, c := range []struct {
		pattern string
		want    float64
	}{
		{`of 24 paged launches, ([0-9.]+) ms a frame`, (20*23.932 + 5) / 20},
		{`device busy ([0-9.]+) ms a frame`, 23.11},
		{`idle ([0-9.]+) ms`, (20*0.822 + 5) / 20},
		{`largest gap a frame averages ([0-9.]+) ms`, (19*0.702 + 5) / 20},
		// The PDL dependent's time inside its predecessor is the
		// predecessor's; it leads only for the 20 µs after it.
		{`attn_f8_paged +([0-9.]+)`, 24 * 0.8},
		{`attn_combine +([0-9.]+)`, 24 * 0.02},
		{`layernorm_w1024 +([0-9.]+)`, 24 * 0.1},
		{`cuBLASLt GEMM +([0-9.]+)`, 20 * 0.05},
		{`copy +([0-9.]+)`, 0.03},
	} {
		if got := msFigure(t, out, c.pattern); got < c.want-0.006 || got > c.want+0.006 {
			t.Errorf("%s: %.3f, want %.3f", c.pattern, got, c.want)
		}
	}
	return out
}

// TestKernelTraceRefuses checks that a record with dropped or untimed
// activities, too short for the frames asked, or without enough regular frames in a row,
// gives an error and no figures.
func TestKernelTraceRefuses(t *testing.T) {
	for name, c := range map[string]struct {
		trace string
		want  string
	}{
		"dropped":   {kernelTrace(t, 70, -1, 0, -1, "D 12\n"), "dropped 12 records"},
		"untimed":   {kernelTrace(t, 70, -1, 0, -1, "K 0 0 attn_f8_paged\nK 0 0 gelu_bf16_v4\n"), "gave 2 no timestamps"},
		"too short": {kernelTrace(t, 10, -1, 0, -1, ""), "too few"},
		// No 20 regular frames in a row among the last 30.
		"irregular": {kernelTrace(t, 70, -1, 0, 55, ""), "no 20 consecutive frames"},
	} {
		out, err := runKernelTrace(t, c.trace, "--frames", "20", "--within", "30", "--label", name)
		if err == nil || !strings.Contains(out, c.want) || strings.Contains(out, "device busy") {
			t.Errorf("%s: err %v, output:\n%s\nwant an error saying %q and no figures", name, err, out, c.want)
		}
	}
}
