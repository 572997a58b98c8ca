package output

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/lingbotmap/lingbotmap/config"
	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/pipeline"
	"github.com/lingbotmap/lingbotmap/engine/scale"
	"github.com/lingbotmap/lingbotmap/engine/source"
	"github.com/lingbotmap/lingbotmap/internal/atomicfile"
)

// RecordFile is the run record's name in the output folder.
const RecordFile = "run.json"

// Record is run.json: what a run did, as it stands at the last checkpoint.
type Record struct {
	Version     string    `json:"version"`
	Status      string    `json:"status"` // one of the run status values below
	Started     time.Time `json:"started"`
	Finished    time.Time `json:"finished"`
	Interrupted bool      `json:"interrupted"`
	Error       string    `json:"error,omitempty"`
	Input       Input     `json:"input"`
	// Weights is the checkpoint the model ran with, or RandomWeights;
	// Meaningful is false for the random test model, whose outputs are
	// noise.
	Weights    string             `json:"weights"`
	Meaningful bool               `json:"meaningful"`
	Engine     map[string]any     `json:"engine"`
	Config     config.Sources     `json:"config"`
	Map        Map                `json:"map"`
	Depth      Depth              `json:"depth"`
	Frames     Frames             `json:"frames"`
	Timings    Timings            `json:"timings"`
	Cache      *engine.CacheStats `json:"cache,omitempty"`
	// Scale is the metric scale: "state" says whether the outputs are in
	// metres (known) or model units (unscaled, estimating: "reason" says why).
	Scale   *scale.Status     `json:"scale,omitempty"`
	Outputs map[string]string `json:"outputs"`
}

// RandomWeights is run.json's "weights" when no checkpoint was given.
const RandomWeights = "random test model"

// The values of run.json's "status".
const (
	StatusInProgress   = "in_progress"   // a checkpoint of a run still going (or killed)
	StatusCompleted    = "completed"     // the whole input was mapped
	StatusInterrupted  = "interrupted"   // stopped by a signal: the outputs cover the frames done
	StatusPartialInput = "partial_input" // the input was truncated or partly corrupt
	StatusFailed       = "failed"        // an error ended the run: see "error"
)

// Checkpoint is what an OnCheckpoint hook is given.
type Checkpoint struct {
	Out     string // the output folder
	Results int    // results the checkpoint covers
	Final   bool   // the end of the run
	Status  string // run.json's status as just written
}

type Input struct {
	Path        string         `json:"path"`
	Description string         `json:"description"`
	Options     source.Options `json:"options"`
	Skipped     int            `json:"skipped_frames,omitempty"` // undecodable bag messages
	SkipReason  string         `json:"first_skip_reason,omitempty"`
}

type Map struct {
	ConfThreshold float64 `json:"conf_threshold"`
	VoxelSize     float64 `json:"voxel_size"`
	PixelStride   int     `json:"pixel_stride"`
	PointsIn      int64   `json:"points_unprojected"`
	Points        int     `json:"points"`
	// Outside are the confident points left out for lying beyond the
	// voxel index range (a map_voxel too small for the scene).
	Outside int64 `json:"points_outside"`
	// frames whose points the GPU made (engine.PointMaker) and the host
	FramesDevice int64 `json:"point_frames_device"`
	FramesHost   int64 `json:"point_frames_host"`
}

type Depth struct {
	Saved       bool    `json:"saved"`
	ColorRanges string  `json:"color_ranges,omitempty"`
	Scale       float64 `json:"scale"`
	Unit        string  `json:"unit"`
	// Metric says every depth/ and depth_color/ image is in metres
	// (depth/ in 1/Scale m); false: model units, or (MetricAt) mixed
	Metric bool `json:"metric"`
	// MetricAt are the frames whose images were written at a metric
	// scale, the others being in model units; the run's end rewrites
	// them all at the final scale
	MetricAt    []MetricFrames `json:"metric_at,omitempty"`
	Clipped     int64          `json:"clipped_pixels"`
	ConfSaved   bool           `json:"conf_saved"`
	ConfScale   float64        `json:"conf_scale"`
	ConfClipped int64          `json:"conf_clipped_pixels"`
}

// MetricFrames are frames First to Last (inclusive) whose depth images
// were written at the metric scale Scale (metres per model unit).
type MetricFrames struct {
	First uint64  `json:"first"`
	Last  uint64  `json:"last"`
	Scale float64 `json:"scale"`
}

type Frames struct {
	Read         int `json:"read"`
	Results      int `json:"results"`
	Scale        int `json:"scale"`
	Keyframes    int `json:"keyframes"`
	NonKeyframes int `json:"non_keyframes"`
	Windows      int `json:"windows"`
}

// Timings are run.json's timings. The stages overlap (the pipeline runs
// them at once), so their sums exceed the time they took together.
type Timings struct {
	TotalS  float64 `json:"total_s"`
	LoadS   float64 `json:"load_s"`
	DecodeS float64 `json:"decode_s"` // reading the input in order (and a bag's or video's decoding)
	// PrepareS is the workers' decoding (image folders) and preprocessing.
	PrepareS float64 `json:"prepare_s"`
	ModelS   float64 `json:"model_s"`  // the engine's Push and Flush calls
	OutputS  float64 `json:"output_s"` // images, unprojection, map, trajectory, checkpoints
	// MappingS runs from the first frame in to now (the last result out at
	// the end); FramesPerS is the results of this run over it.
	MappingS        float64 `json:"mapping_s"`
	FramesPerS      float64 `json:"frames_per_s"`
	OverallFramesPS float64 `json:"overall_frames_per_s"` // results over total_s, loading included
	MsPerFrame      float64 `json:"model_ms_per_frame"`
	ModelFramesPS   float64 `json:"model_frames_per_s"`
	// Medians are the per-frame medians of each stage.
	Medians *Medians `json:"median_ms,omitempty"`
	// ModelThread is where the model's goroutine spent the run: in the
	// engine's calls, waiting for a prepared frame, and held back by the
	// stages after it. Busy well below the run's time with little input
	// wait means the stages after the model bound the rate.
	ModelThread *ModelThread `json:"model_thread,omitempty"`
}

// ModelThread is run.json's split of the model goroutine's time, in
// seconds.
type ModelThread struct {
	BusyS       float64 `json:"busy_s"`
	WaitInputS  float64 `json:"wait_input_s"`
	WaitOutputS float64 `json:"wait_output_s"`
}

// WriteRecord replaces dir's run.json with rec, atomically.
func WriteRecord(dir string, rec *Record) error {
	return atomicfile.WriteFile(filepath.Join(dir, RecordFile), func(f io.Writer) error {
		e := json.NewEncoder(f)
		e.SetIndent("", "  ")
		return e.Encode(rec)
	})
}

// Medians are run.json's per-frame medians, in milliseconds. Model is the
// engine call that gave the frame's result (phase 1's frames share one);
// latency runs from a frame's submission to its delivery.
type Medians struct {
	Frames  int     `json:"frames"`
	Queue   float64 `json:"queue"`
	Prepare float64 `json:"prepare"`
	Ahead   float64 `json:"ahead"`
	Model   float64 `json:"model"`
	Post    float64 `json:"post"`
	Latency float64 `json:"latency"`
}

// stageTimes keeps every frame's time in each stage, for the medians.
type stageTimes struct {
	queue, prepare, ahead, model, post, latency []float32 // milliseconds
}

func (s *stageTimes) add(t pipeline.Timing) {
	ms := func(d time.Duration) float32 { return float32(d.Seconds() * 1000) }
	s.queue = append(s.queue, ms(t.Queue))
	s.prepare = append(s.prepare, ms(t.Prepare))
	s.ahead = append(s.ahead, ms(t.Ahead))
	s.model = append(s.model, ms(t.Model))
	s.post = append(s.post, ms(t.Post))
	s.latency = append(s.latency, ms(t.Latency))
}

func (s *stageTimes) medians() *Medians {
	if len(s.model) == 0 {
		return nil
	}
	return &Medians{
		Frames: len(s.model), Queue: median(s.queue), Prepare: median(s.prepare), Ahead: median(s.ahead),
		Model: median(s.model), Post: median(s.post), Latency: median(s.latency),
	}
}

// median is the nearest-rank median.
func median(v []float32) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return float64(s[(len(s)+1)/2-1])
}

// EngineSettings lists, for run.json, the engine settings that ran under their keys: the
// arithmetic actually used as the precision (fp32 on the CPU), and the cuda
// section only on the GPU.
func EngineSettings(c engine.Config) map[string]any {
	out := config.Values(&c)
	out["precision"] = c.ComputePrecision()
	if c.Device != "cuda" {
		for k := range out {
			if strings.HasPrefix(k, "cuda.") {
				delete(out, k)
			}
		}
	}
	return out
}

// Conclude sets the record's final status from how the run ended:
// interrupted by a signal, ended by runErr (a source read in part counts as
// partial input), or with skipErr, the first of the frames that did not
// decode (skipped and counted in Input.Skipped), which makes a run without
// another error partial too. It returns the run's error, which then says
// how many of the frames were used.
func (r *Record) Conclude(interrupted bool, runErr, skipErr error, results int) error {
	r.Interrupted = interrupted
	switch {
	case interrupted:
		r.Status = StatusInterrupted
	case runErr != nil && errors.Is(runErr, source.ErrPartial):
		r.Status = StatusPartialInput
	case runErr != nil:
		r.Status = StatusFailed
	case r.Input.Skipped > 0:
		r.Status = StatusPartialInput
		runErr = fmt.Errorf("%w: %d frames were used; %d did not decode and were skipped, the first %w", source.ErrPartial, results, r.Input.Skipped, skipErr)
	default:
		r.Status = StatusCompleted
	}
	if runErr != nil && !interrupted {
		r.Error = runErr.Error()
	}
	return runErr
}
