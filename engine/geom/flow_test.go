package geom

import (
	"math"
	"testing"

	goldencase "github.com/lingbotmap/lingbotmap/engine/golden"
	"github.com/lingbotmap/lingbotmap/internal/shared"
)

func loadManifest(t *testing.T, c string) *goldencase.Manifest {
	t.Helper()
	dir, err := shared.Path("golden", c)
	if err != nil {
		t.Fatalf("golden data: %v", err)
	}
	m, err := goldencase.Load(dir)
	if err != nil {
		t.Fatalf("golden data: %v", err)
	}
	return m
}

// TestFlowKeyframesMatchGolden replays the reference's flow keyframe run: every
// flow value it logged is recomputed from the logged poses and depths, and every
// commit/rollback decision and frame type follows.
func TestFlowKeyframesMatchGolden(t *testing.T) {
	m := loadManifest(t, "stream_flow")
	out := golden(t, "stream_flow", "outputs.safetensors")
	pe, _ := out("pose_enc")
	depth, _ := out("depth")
	enc := poses(pe)
	n := goldenH * goldenW
	ns := m.Settings.NumScaleFrames
	if m.Settings.FlowThreshold != 14 || ns != 3 {
		t.Fatalf("unexpected golden settings %+v", m.Settings)
	}

	// Index the logged flow values and decisions by call (call c ≥ 1 is frame c+ns−1).
	flows := map[int]float64{}
	decisions := map[int]bool{}
	for _, e := range m.Events {
		switch e.Event {
		case "flow":
			if e.Value == nil {
				t.Fatalf("flow event after call %d has no value", *e.AfterCall)
			}
			flows[*e.AfterCall] = *e.Value
		case "commit", "rollback":
			decisions[*e.AfterCall] = e.Event == "commit"
		}
	}
	if len(flows) != len(enc)-ns {
		t.Fatalf("manifest logs %d flow values, want %d", len(flows), len(enc)-ns)
	}

	kf := NewFlowKeyframes(float32(m.Settings.FlowThreshold), m.Settings.MaxNonKeyframeGap, ns, enc[ns-1])
	var worst float64
	for f := ns; f < len(enc); f++ {
		call := f - ns + 1
		isKF, flow, err := kf.Decide(f, enc[f], depth[f*n:(f+1)*n], goldenW, goldenH)
		if err != nil {
			t.Fatal(err)
		}
		e := relErr(float64(flow), flows[call], 1e-6)
		worst = math.Max(worst, e)
		t.Logf("frame %2d: flow %9.5f (reference %9.5f, rel err %.1e) keyframe %v", f, flow, flows[call], e, isKF)
		if e > 1e-4 {
			t.Errorf("frame %d: flow %g, reference %g", f, flow, flows[call])
		}
		if isKF != decisions[call] {
			t.Errorf("frame %d: keyframe %v, reference committed %v", f, isKF, decisions[call])
		}
		wantType := 2
		if isKF {
			wantType = 1
		}
		if m.FrameType[f] != wantType {
			t.Errorf("frame %d: frame_type %d, reference %d", f, wantType, m.FrameType[f])
		}
	}
	t.Logf("flow: max rel err %.2g over %d frames", worst, len(flows))
}

// TestMeanFlowBasics: no motion gives no flow; a sideways move gives the
// disparity f·b/d on a fronto-parallel plane; invalid samples are left out.
func TestMeanFlowBasics(t *testing.T) {
	h, w := 16, 24
	fov := float32(2 * math.Atan(0.5)) // f = size
	pose := [9]float32{0, 0, 0, 0, 0, 0, 1, fov, fov}
	depth := make([]float32, h*w)
	for i := range depth {
		depth[i] = 2
	}
	f, err := MeanFlow(pose, pose, depth, w, h, DefaultFlowStride)
	if err != nil || f != 0 {
		t.Fatalf("static camera: flow %g, err %v", f, err)
	}
	moved := pose
	moved[0] = 0.1 // keyframe 0.1 to the right of the current camera
	f, err = MeanFlow(pose, moved, depth, w, h, DefaultFlowStride)
	want := float32(w) * 0.1 / 2 // fx·b/d
	if err != nil || math.Abs(float64(f-want)) > 1e-5 {
		t.Fatalf("sideways move: flow %g, want %g (err %v)", f, want, err)
	}
	for i := range depth {
		depth[i] = 0
	}
	if f, _ := MeanFlow(pose, moved, depth, w, h, DefaultFlowStride); f != 0 {
		t.Fatalf("no valid depth: flow %g, want 0", f)
	}
	if _, err := MeanFlow(pose, moved, depth[:7], w, h, DefaultFlowStride); err == nil {
		t.Fatal("short depth map accepted")
	}
}
