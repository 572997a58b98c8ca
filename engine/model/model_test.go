package model

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/cpu"
	"github.com/lingbotmap/lingbotmap/engine/golden/goldentest"
	"github.com/lingbotmap/lingbotmap/engine/weights"
)

func TestSelectedLayersFor(t *testing.T) {
	for _, tc := range []struct {
		depth int
		want  []int
	}{
		{24, []int{4, 11, 17, 23}},
		{5, []int{0, 2, 3, 4}}, // the tiny golden model's manifest
		{12, []int{2, 5, 8, 11}},
	} {
		if got := SelectedLayersFor(tc.depth); !slices.Equal(got, tc.want) {
			t.Errorf("SelectedLayersFor(%d) = %v, want %v", tc.depth, got, tc.want)
		}
	}
}

// editedStore is the golden tiny checkpoint with tensors removed, added or
// replaced, to check what Load says about a wrong file.
type editedStore struct {
	weights.Store
	drop  map[string]bool
	extra map[string][]int
}

func (s editedStore) Keys() []string {
	var keys []string
	for _, k := range s.Store.Keys() {
		if !s.drop[k] {
			keys = append(keys, k)
		}
	}
	for k := range s.extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (s editedStore) Info(name string) (weights.Info, bool) {
	if sh, ok := s.extra[name]; ok {
		return weights.Info{DType: "F32", Shape: sh}, true
	}
	if s.drop[name] {
		return weights.Info{}, false
	}
	return s.Store.Info(name)
}

func (s editedStore) Float32(name string) ([]float32, error) {
	if sh, ok := s.extra[name]; ok {
		n := 1
		for _, d := range sh {
			n *= d
		}
		return make([]float32, n), nil
	}
	return s.Store.Float32(name)
}

func TestLoadNamesWhatIsWrong(t *testing.T) {
	base := goldentest.Open(t, "weights.safetensors")
	be := cpu.New(cpu.Config{Threads: 1})
	opt := Options{SelectedLayers: []int{0, 2, 3, 4}}
	for _, tc := range []struct {
		name  string
		store editedStore
		opt   Options
		want  string // empty: loads
	}{
		{"as is", editedStore{Store: base}, opt, ""},
		{"missing", editedStore{Store: base, drop: map[string]bool{"aggregator.global_blocks.3.attn.q_norm.bias": true}}, opt,
			`missing tensor "aggregator.global_blocks.3.attn.q_norm.bias"`},
		{"mis-shaped", editedStore{Store: base, extra: map[string][]int{"camera_head.trunk.1.ls2.gamma": {255}}}, opt,
			`"camera_head.trunk.1.ls2.gamma" has shape [255], want [256]`},
		{"extra", editedStore{Store: base, extra: map[string][]int{"aggregator.bogus.weight": {3}}}, opt,
			"1 checkpoint tensors are not used by the model: aggregator.bogus.weight"},
		{"extra allowed", editedStore{Store: base, extra: map[string][]int{"aggregator.bogus.weight": {3}}},
			Options{SelectedLayers: opt.SelectedLayers, AllowUnusedWeights: true}, ""},
		{"frame and global depth differ", editedStore{Store: base, drop: map[string]bool{"aggregator.global_blocks.4.norm1.weight": true}}, opt,
			"5 frame blocks and 4 global blocks"},
		{"layers out of range", editedStore{Store: base}, Options{SelectedLayers: []int{0, 2, 5}}, "selected layers [0 2 5]"},
		{"default layers", editedStore{Store: base}, Options{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Load(be, tc.store, tc.opt)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				s := m.Sizes()
				if s.Embed != 128 || s.Heads != 2 || s.Depth != 5 || s.DinoDepth != 2 || s.DinoGrid != 5 || s.PatchSize != 14 ||
					s.CamDim != 256 || s.CamDepth != 2 || s.NumSpecial != 6 || !slices.Equal(s.SelectedLayers, []int{0, 2, 3, 4}) {
					t.Errorf("sizes %+v do not describe the tiny model", s)
				}
				m.Close()
				return
			}
			if err == nil {
				t.Fatalf("Load accepted the checkpoint; want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load: %v\nwant it to say %q", err, tc.want)
			}
		})
	}
}

func TestForwardRejectsMisuse(t *testing.T) {
	gc := loadCase(t, "stream_kf1")
	mdl := loadTiny(t, gc.m, false)
	ctx := context.Background()
	h, w := gc.h, gc.w
	img := gc.images[0]

	expectErr := func(what string, err error, want string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got error %v, want one saying %q", what, err, want)
		}
	}
	_, err := mdl.Forward(ctx, nil, h, w, Step{})
	expectErr("no images", err, "at least one image")
	_, err = mdl.Forward(ctx, [][]float32{img[:10]}, h, w, Step{})
	expectErr("short image", err, "image 0 has 10 values")
	_, err = mdl.Forward(ctx, [][]float32{img}, h+1, w, Step{})
	expectErr("size", err, "multiples of the patch size 14")
	_, err = mdl.Forward(ctx, [][]float32{img}, h, w, Step{SkipAppend: true, DeferEviction: true})
	expectErr("both flags", err, "cannot both")
	_, err = mdl.Forward(ctx, gc.images[:2], h, w, Step{SkipAppend: true})
	expectErr("phase 1 non-keyframe", err, "phase 1")
	expectErr("rollback with nothing pending", mdl.Rollback(), "nothing to roll back")
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = mdl.Forward(cctx, gc.images[:3], h, w, Step{})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: got %v", err)
	}
	if st := mdl.Stats(); st.FrameCount != 0 {
		t.Errorf("a cancelled call left %d frames in the cache", st.FrameCount)
	}

	if _, err := mdl.Forward(ctx, gc.images[:3], h, w, Step{}); err != nil {
		t.Fatal(err)
	}
	_, err = mdl.Forward(ctx, gc.images[3:5], h, w, Step{})
	expectErr("second phase 1", err, "needs an empty cache")
	_, err = mdl.Forward(ctx, [][]float32{make([]float32, 3*28*28)}, 28, 28, Step{})
	expectErr("resolution change", err, "Reset before changing resolution")

	if _, err := mdl.Forward(ctx, gc.images[3:4], h, w, Step{DeferEviction: true}); err != nil {
		t.Fatal(err)
	}
	_, err = mdl.Forward(ctx, gc.images[4:5], h, w, Step{})
	if !errors.Is(err, ErrPending) {
		t.Errorf("Forward with a pending deferred frame: got %v, want ErrPending", err)
	}
	if err := mdl.Rollback(); err != nil {
		t.Fatal(err)
	}
	if st := mdl.Stats(); st.FrameCount != 3 || mdl.CameraFrames() != 4 {
		t.Errorf("after rollback: %d frames in the KV cache (want 3), %d in the camera head (want 4: it keeps rejected frames)", st.FrameCount, mdl.CameraFrames())
	}
}

// TestResetReplaysExactly: after Reset a stream starts from scratch, so the
// same frames give bit-identical poses, also at another resolution.
func TestResetReplaysExactly(t *testing.T) {
	gc := loadCase(t, "stream_kf1")
	mdl := loadTiny(t, gc.m, false)
	ctx := context.Background()
	run := func() [][9]float32 {
		var poses [][9]float32
		out, err := mdl.Forward(ctx, gc.images[:3], gc.h, gc.w, Step{})
		if err != nil {
			t.Fatal(err)
		}
		poses = append(poses, out.PoseEnc...)
		for i := 3; i < 6; i++ {
			out, err := mdl.Forward(ctx, gc.images[i:i+1], gc.h, gc.w, Step{SkipAppend: i == 4})
			if err != nil {
				t.Fatal(err)
			}
			poses = append(poses, out.PoseEnc...)
		}
		return poses
	}
	first := run()
	mdl.Reset()
	if st := mdl.Stats(); st.FrameCount != 0 || st.SpecialTokens != 0 || mdl.CameraFrames() != 0 {
		t.Fatalf("after Reset: stats %+v, camera frames %d", st, mdl.CameraFrames())
	}
	// A different resolution in between must not disturb the replay.
	if _, err := mdl.Forward(ctx, [][]float32{make([]float32, 3*28*42)}, 28, 42, Step{}); err != nil {
		t.Fatal(err)
	}
	mdl.Reset()
	second := run()
	if !slices.Equal(first, second) {
		t.Errorf("replay after Reset differs:\n%v\n%v", first, second)
	}
}

func TestMaxFramesIsAnError(t *testing.T) {
	gc := loadCase(t, "stream_kf1")
	st := goldentest.Open(t, "weights.safetensors")
	mdl, err := Load(cpu.New(cpu.Config{}), st, Options{ScaleFrames: 3, SlidingWindow: 4, MaxFrames: 4, SelectedLayers: []int{0, 2, 3, 4}})
	if err != nil {
		t.Fatal(err)
	}
	defer mdl.Close()
	ctx := context.Background()
	if _, err := mdl.Forward(ctx, gc.images[:3], gc.h, gc.w, Step{}); err != nil {
		t.Fatal(err)
	}
	if _, err := mdl.Forward(ctx, gc.images[3:4], gc.h, gc.w, Step{}); err != nil {
		t.Fatal(err)
	}
	_, err = mdl.Forward(ctx, gc.images[4:5], gc.h, gc.w, Step{})
	if err == nil || !strings.Contains(err.Error(), "MaxFrames") {
		t.Fatalf("frame past MaxFrames: got %v, want an error naming MaxFrames", err)
	}
}

// TestKeepDepth: a call with Step.KeepDepth also hands out each frame's
// depth and confidence maps as backend tensors holding exactly the values
// of Output.Depth and DepthConf, a whole phase 1 and one frame, heads run
// at once or frame by frame; without it there are none.
func TestKeepDepth(t *testing.T) {
	gc := loadCase(t, "stream_kf1")
	ctx := context.Background()
	for _, frameHeads := range []bool{false, true} {
		mdl := loadTiny(t, gc.m, false)
		be := mdl.be
		for _, imgs := range [][][]float32{gc.images[:3], gc.images[3:4], gc.images[4:5]} {
			keep := len(imgs) > 1 || !frameHeads
			out, err := mdl.Forward(ctx, imgs, gc.h, gc.w, Step{KeepDepth: keep, FrameHeads: frameHeads})
			if err != nil {
				t.Fatal(err)
			}
			if !keep {
				if out.DeviceDepth != nil || out.DeviceConf != nil {
					t.Fatal("maps kept without KeepDepth")
				}
				continue
			}
			if len(out.DeviceDepth) != len(imgs) || len(out.DeviceConf) != len(imgs) {
				t.Fatalf("%d frames: %d depth and %d confidence maps kept", len(imgs), len(out.DeviceDepth), len(out.DeviceConf))
			}
			for i := range imgs {
				if !slices.Equal(be.ToHost(out.DeviceDepth[i]), out.Depth[i]) || !slices.Equal(be.ToHost(out.DeviceConf[i]), out.DepthConf[i]) {
					t.Fatalf("frame %d (frame heads %v): the kept maps differ from the output's", i, frameHeads)
				}
				be.Free(out.DeviceDepth[i])
				be.Free(out.DeviceConf[i])
			}
		}
	}
}
