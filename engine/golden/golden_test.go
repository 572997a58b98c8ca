package golden

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/internal/shared"
)

func caseDir(t *testing.T, name string) string {
	t.Helper()
	dir, err := shared.Path("golden", name)
	if err != nil {
		t.Fatalf("golden data: %v", err)
	}
	return dir
}

// TestLoadStreamKF1 checks the decoded manifest against values read from the
// file by hand (python3 -m json.tool).
func TestLoadStreamKF1(t *testing.T) {
	m, err := Load(caseDir(t, "stream_kf1"))
	if err != nil {
		t.Fatal(err)
	}
	c, s := m.Config, m.Settings
	if len(c.SelectedIdx) != 4 || c.SelectedIdx[3] != 4 || c.ScaleFrames != 3 || c.SlidingWindow != 4 ||
		c.MaxFrameNum != 256 || c.CameraIterations != 4 || c.ImgH != 42 || c.ImgW != 70 {
		t.Errorf("config %+v", c)
	}
	if s.Mode != "streaming" || s.Frames != 16 || s.KeyframeInterval != 1 || s.NumScaleFrames != 3 ||
		s.KVScaleFrames != 3 || s.KVSlidingWindow != 4 || s.WindowSize != 9 || s.CameraIterations != 4 ||
		s.FlowThreshold != 0 || s.MaxNonKeyframeGap != 30 || s.Dtype != "float32" ||
		len(s.ImageHW) != 2 || s.ImageHW[0] != 42 || s.ImageHW[1] != 70 {
		t.Errorf("settings %+v", s)
	}
	if s.OverlapSize == nil || *s.OverlapSize != 3 || s.OverlapKeyframes != nil || s.ImageFiles != nil {
		t.Errorf("overlap_size %v, overlap_keyframes %v (want 3, null), image_files %v (want null)", s.OverlapSize, s.OverlapKeyframes, s.ImageFiles)
	}
	if len(m.FrameType) != 16 || m.FrameType[2] != 0 || m.FrameType[3] != 1 {
		t.Errorf("frame_type %v", m.FrameType)
	}
	if len(m.PerCall) != 14 {
		t.Fatalf("%d calls logged, want 14", len(m.PerCall))
	}
	p0, p1 := m.PerCall[0], m.PerCall[1]
	if p0.FramesIn != 3 || p0.FIAttended != nil {
		t.Errorf("call 0: %d frames in, attended %v; want 3 and none (phase 1)", p0.FramesIn, p0.FIAttended)
	}
	wantAfter := "{FrameCount:4 ScalePages:3 LivePages:1 FreePages:19 SpecialTokens:24 VisiblePages:6 LastPageLen:9 PageSize:15}"
	if got := p1.FIAfter.String(); got != wantAfter {
		t.Errorf("call 1 fi_after %s, want %s", got, wantAfter)
	}
	if p1.Call != 1 || p1.FramesIn != 1 || p1.SkipAppend {
		t.Errorf("call 1: %+v", p1)
	}
	a := p1.FIAttended
	if a == nil {
		t.Fatal("call 1 logs no attention")
	}
	if a.KVTokens != 84 || a.VisiblePages != 6 || a.LastPageLen != 9 || a.ScalePages != 3 {
		t.Errorf("call 1 fi_attended %s", a)
	}
	// fi_after logs the frame count but not kv_tokens; fi_attended the reverse.
	if !p1.FIAfter.Logged("frame_count") || p1.FIAfter.Logged("kv_tokens") || !a.Logged("kv_tokens") || a.Logged("frame_count") {
		t.Errorf("logged fields: after frame_count %v kv_tokens %v, attended frame_count %v kv_tokens %v",
			p1.FIAfter.Logged("frame_count"), p1.FIAfter.Logged("kv_tokens"), a.Logged("frame_count"), a.Logged("kv_tokens"))
	}
	if len(m.Events) != 1 || m.Events[0].Event != "clean_kv_cache" || m.Events[0].BeforeCall == nil || *m.Events[0].BeforeCall != 0 ||
		m.Events[0].AfterCall != nil || m.Events[0].Value != nil {
		t.Errorf("events %+v, want one clean_kv_cache before call 0", m.Events)
	}
}

func TestLoadFlowAndWindowed(t *testing.T) {
	m, err := Load(caseDir(t, "stream_flow"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Settings.FlowThreshold != 14 {
		t.Errorf("flow_threshold %v, want 14", m.Settings.FlowThreshold)
	}
	var first *Event
	for i := range m.Events {
		if m.Events[i].Event == "flow" {
			first = &m.Events[i]
			break
		}
	}
	if first == nil || first.AfterCall == nil || *first.AfterCall != 1 || first.Value == nil || *first.Value < 30.2094 || *first.Value > 30.2095 {
		t.Errorf("first flow event %+v, want 30.2095 px after call 1", first)
	}

	w, err := Load(caseDir(t, "windowed_kf2"))
	if err != nil {
		t.Fatal(err)
	}
	if w.Settings.Mode != "windowed" || w.Settings.KeyframeInterval != 2 || len(w.PerCall) != 15 || w.FrameType[4] != 2 {
		t.Errorf("windowed_kf2: mode %q, interval %d, %d calls, frame types %v", w.Settings.Mode, w.Settings.KeyframeInterval, len(w.PerCall), w.FrameType)
	}

	im, err := Load(caseDir(t, "images_kf1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Settings.ImageFiles) != 16 || im.Settings.ImageFiles[0] != "000000.png" {
		t.Errorf("images_kf1 image_files %v", im.Settings.ImageFiles)
	}
}

func TestOpenAndTensor(t *testing.T) {
	dir := caseDir(t, "stream_kf1")
	st, err := Open(dir, InputsFile)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	v, shape, err := Tensor(st, "images")
	if err != nil {
		t.Fatal(err)
	}
	if len(shape) != 4 || shape[0] != 16 || shape[1] != 3 || shape[2] != 42 || shape[3] != 70 || len(v) != 16*3*42*70 {
		t.Errorf("images shape %v with %d values, want [16 3 42 70]", shape, len(v))
	}
	if _, _, err := Tensor(st, "no_such_tensor"); err == nil || !strings.Contains(err.Error(), `"no_such_tensor"`) {
		t.Errorf("missing tensor: error %v, want one naming it", err)
	}
	if _, err := Open(dir, "missing.safetensors"); err == nil || !strings.Contains(err.Error(), "missing.safetensors") {
		t.Errorf("missing file: error %v, want one naming it", err)
	}
}

func TestLoadErrors(t *testing.T) {
	empty := t.TempDir()
	_, err := Load(empty)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "manifest.json is missing") {
		t.Errorf("no manifest: error %v, want a wrapped not-exist error saying manifest.json is missing", err)
	}

	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, ManifestFile), []byte(`{"settings": {"frames": "sixteen"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad)
	var typeErr *json.UnmarshalTypeError
	if err == nil || !strings.Contains(err.Error(), "not a valid golden manifest") || !errors.As(err, &typeErr) {
		t.Errorf("wrong type: error %v", err)
	}

	trunc := t.TempDir()
	if err := os.WriteFile(filepath.Join(trunc, ManifestFile), []byte(`{"per_call": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(trunc); err == nil || !strings.Contains(err.Error(), "not a valid golden manifest") {
		t.Errorf("truncated JSON: error %v", err)
	}
}
