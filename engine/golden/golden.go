// Package golden reads the golden cases that tools/make_golden.py wrote with
// the official PyTorch code (../shared/golden/<case>): manifest.json, the
// settings and logs of the run, and the inputs/outputs safetensors files.
//
// It is a leaf package: tests of every layer and the verify command use it,
// so it imports only the standard library and engine/weights.
package golden

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/lingbotmap/lingbotmap/engine/weights"
)

// File names inside a case folder.
const (
	ManifestFile = "manifest.json"
	InputsFile   = "inputs.safetensors"
	OutputsFile  = "outputs.safetensors"
)

// Manifest is the part of a case's manifest.json that the Go code reads.
// Fields absent from the file keep their zero value; unknown fields are
// ignored, as the manifest also carries provenance the engine has no use for.
type Manifest struct {
	Config   Config   `json:"config"`
	Settings Settings `json:"settings"`
	// FrameType per frame: 0 scale, 1 keyframe, 2 non-keyframe.
	FrameType []int `json:"frame_type"`
	// PerCall logs the KV cache around every forward call of the model.
	PerCall []Call `json:"per_call"`
	// Events logs cache resets and keyframe decisions between calls.
	Events []Event `json:"events"`
}

// Config is the tiny model's architecture and cache sizes.
type Config struct {
	SelectedIdx      []int `json:"selected_idx"`
	ScaleFrames      int   `json:"scale_frames"`
	SlidingWindow    int   `json:"sliding_window"`
	MaxFrameNum      int   `json:"max_frame_num"`
	CameraIterations int   `json:"camera_iterations"`
	ImgH             int   `json:"img_h"`
	ImgW             int   `json:"img_w"`
}

// Settings are the inference settings of the run.
type Settings struct {
	Mode              string  `json:"mode"` // "streaming" or "windowed"
	Frames            int     `json:"frames"`
	KeyframeInterval  int     `json:"keyframe_interval"`
	NumScaleFrames    int     `json:"num_scale_frames"`
	KVScaleFrames     int     `json:"kv_cache_scale_frames"`
	KVSlidingWindow   int     `json:"kv_cache_sliding_window"`
	WindowSize        int     `json:"window_size"`
	OverlapSize       *int    `json:"overlap_size"`      // nil when null
	OverlapKeyframes  *int    `json:"overlap_keyframes"` // nil when null
	CameraIterations  int     `json:"camera_num_iterations"`
	FlowThreshold     float64 `json:"flow_threshold"` // 0: no flow keyframes
	MaxNonKeyframeGap int     `json:"max_non_keyframe_gap"`
	ImageHW           []int   `json:"image_hw"`
	Dtype             string  `json:"dtype"`
	// ImageFiles are the decoded images, relative to ../data; nil for random inputs.
	ImageFiles []string `json:"image_files"`
}

// Call is one forward call of the model and the cache state around it.
type Call struct {
	Call       int  `json:"call"`
	FramesIn   int  `json:"frames_in"`
	SkipAppend bool `json:"skip_append"` // a non-keyframe that attends and is rolled back
	// FIAfter is the cache after the call.
	FIAfter CacheStats `json:"fi_after"`
	// FIAttended is the cache the paged attention saw; nil for calls
	// without a paged attention (phase 1).
	FIAttended        *CacheStats `json:"fi_attended"`
	TFPBefore         int         `json:"tfp_before"`
	TFPAfter          int         `json:"tfp_after"`
	RopeFirst         int         `json:"rope_frame_index_first"`
	CameraCacheFrames int         `json:"camera_cache_frames"`
}

// CacheStats is the reference FlashInfer manager's bookkeeping. The two logs
// carry different fields: FrameCount, FreePages and PageSize are logged in
// fi_after only and KVTokens in fi_attended only; a field that is not logged
// reads as zero (use Logged to tell).
type CacheStats struct {
	FrameCount    int `json:"frame_count"`
	ScalePages    int `json:"scale_pages"`
	LivePages     int `json:"live_pages"`
	FreePages     int `json:"free_pages"`
	SpecialTokens int `json:"special_tokens"`
	VisiblePages  int `json:"visible_pages"`
	LastPageLen   int `json:"last_page_len"`
	PageSize      int `json:"page_size"`
	KVTokens      int `json:"kv_tokens"`

	// logged holds the JSON names present in the file.
	logged map[string]bool
}

// UnmarshalJSON decodes the fields and remembers which ones were present.
func (s *CacheStats) UnmarshalJSON(b []byte) error {
	type plain CacheStats // no methods: avoids recursing into UnmarshalJSON
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return err
	}
	p.logged = make(map[string]bool, len(keys))
	for k, v := range keys {
		p.logged[k] = string(v) != "null"
	}
	*s = CacheStats(p)
	return nil
}

// Logged reports whether the manifest logged the field with this JSON name
// (for example "frame_count" or "kv_tokens").
func (s *CacheStats) Logged(name string) bool { return s.logged[name] }

// String prints the fields like %+v of a plain struct, leaving out KVTokens
// when it was not logged and the bookkeeping of which fields were.
func (s CacheStats) String() string {
	out := fmt.Sprintf("{FrameCount:%d ScalePages:%d LivePages:%d FreePages:%d SpecialTokens:%d VisiblePages:%d LastPageLen:%d PageSize:%d",
		s.FrameCount, s.ScalePages, s.LivePages, s.FreePages, s.SpecialTokens, s.VisiblePages, s.LastPageLen, s.PageSize)
	if s.logged["kv_tokens"] {
		out += fmt.Sprintf(" KVTokens:%d", s.KVTokens)
	}
	return out + "}"
}

// Event is a cache reset or a keyframe decision between calls.
type Event struct {
	// Event is "clean_kv_cache", "flow", "commit" or "rollback".
	Event      string   `json:"event"`
	AfterCall  *int     `json:"after_call"`  // nil when not logged
	BeforeCall *int     `json:"before_call"` // nil when not logged
	Value      *float64 `json:"value"`       // the flow in pixels for "flow"; nil otherwise
}

// Load reads dir/manifest.json.
func Load(dir string) (*Manifest, error) {
	p := filepath.Join(dir, ManifestFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s is not a golden case: %s is missing: %w", dir, ManifestFile, err)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the golden manifest: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: not a valid golden manifest: %w", p, err)
	}
	return &m, nil
}

// Open opens one safetensors file of a case (InputsFile, OutputsFile, or
// another such as "intermediates.safetensors"); the caller closes it. Its
// errors name the file.
func Open(dir, file string) (*weights.SafeTensors, error) {
	return weights.OpenSafeTensors(filepath.Join(dir, file))
}

// Tensor reads a float32 tensor and its shape.
func Tensor(st *weights.SafeTensors, name string) ([]float32, []int, error) {
	info, ok := st.Info(name)
	if !ok {
		return nil, nil, fmt.Errorf("%s has no tensor %q", st.Path(), name)
	}
	v, err := st.Float32(name)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", st.Path(), err)
	}
	return v, info.Shape, nil
}
