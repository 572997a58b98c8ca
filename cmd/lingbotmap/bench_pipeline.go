package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/diagnostic_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/preprocess"
	"github.com/lingbotmap/lingbotmap/internal/atomicfile"
	"github.com/lingbotmap/lingbotmap/node"
)

// bench --pipeline feeds encoded camera frames through the node core
// exactly as a transport would (a callback per message, no middleware) and
// measures the whole frame path: decoding, preprocessing, the model,
// unprojection and message building, map insertion and publishing.

// pipelineOptions are bench --pipeline's own flags.
type pipelineOptions struct {
	on       bool
	rate     float64 // frames per second; 0 = as fast as the node takes them
	encoding string  // png, jpeg or raw
	size     string  // WxH of the camera frames
	images   string  // folder of the source pictures
	jsonOut  string
}

// pipelineFlags registers the --pipeline flags.
func (p *pipelineOptions) flags(cmd interface {
	BoolVar(*bool, string, bool, string)
	Float64Var(*float64, string, float64, string)
	StringVar(*string, string, string, string)
	MarkDeprecated(name, usage string) error
}) {
	cmd.BoolVar(&p.on, "pipeline", false, "time the node's whole frame path on encoded camera frames (decode, model, clouds, messages) instead of the model alone")
	cmd.Float64Var(&p.rate, "frame-rate", 0, "--pipeline: frames per second of the simulated camera (0 = as fast as the node takes them, every frame processed; > 0 = paced, with the node's queue policy latest)")
	// --rate was this flag's name; bag play's --rate is a speed factor
	cmd.Float64Var(&p.rate, "rate", 0, "")
	if err := cmd.MarkDeprecated("rate", "use --frame-rate (bag play --rate is a speed factor)"); err != nil {
		panic(err) // the flag is defined just above
	}
	cmd.StringVar(&p.encoding, "encoding", "jpeg", "--pipeline: how the frames travel: jpeg or png (sensor_msgs/CompressedImage) or raw (sensor_msgs/Image rgb8)")
	cmd.StringVar(&p.size, "pipeline-size", "640x480", "--pipeline: camera frame size WxH (the node resizes to image_width)")
	cmd.StringVar(&p.images, "pipeline-images", filepath.Join("test", "data", "courthouse"), "--pipeline: folder of the pictures the frames are made from (cycled)")
	cmd.StringVar(&p.jsonOut, "json", "", "--pipeline: also write the whole record (every frame's times) to this JSON file")
}

// parseSize reads "WxH".
func parseSize(s string) (w, h int, err error) {
	a, b, ok := strings.Cut(strings.ToLower(s), "x")
	if ok {
		w, err = strconv.Atoi(a)
		if err == nil {
			h, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil || w < 1 || h < 1 || w > 8192 || h > 8192 {
		return 0, 0, fmt.Errorf("--pipeline-size %q: want WxH, such as 640x480", s)
	}
	return w, h, nil
}

// cameraFrames reads the pictures of dir, scales each to w×h and encodes it
// once as the messages a camera driver would send (their headers are set
// per frame).
func cameraFrames(dir string, w, h int, encoding string) ([]any, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("--pipeline-images: %w", err)
	}
	var out []any
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if e.IsDir() || (ext != ".jpg" && ext != ".jpeg" && ext != ".png") {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		src, _, err := image.Decode(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("--pipeline-images: %s: %w", e.Name(), err)
		}
		rgb, err := preprocess.FromImage(src)
		if err == nil {
			rgb, err = preprocess.ResizeRGB(rgb, w, h)
		}
		if err != nil {
			return nil, fmt.Errorf("--pipeline-images: %s: %w", e.Name(), err)
		}
		msg, err := encodeFrame(rgb, encoding)
		if err != nil {
			return nil, err
		}
		out = append(out, msg)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--pipeline-images: no .jpg or .png pictures in %s", dir)
	}
	return out, nil
}

func encodeFrame(img preprocess.RGB, encoding string) (any, error) {
	var buf bytes.Buffer
	switch encoding {
	case "jpeg":
		if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90}); err != nil {
			return nil, err
		}
		return &sensor_msgs.CompressedImage{Format: "jpeg", Data: buf.Bytes()}, nil
	case "png":
		if err := png.Encode(&buf, img); err != nil {
			return nil, err
		}
		return &sensor_msgs.CompressedImage{Format: "png", Data: buf.Bytes()}, nil
	case "raw":
		return &sensor_msgs.Image{Height: uint32(img.H), Width: uint32(img.W), Encoding: "rgb8", Step: uint32(3 * img.W), Data: img.Pix}, nil
	}
	return nil, fmt.Errorf("--encoding %q: want jpeg, png or raw", encoding)
}

// withHeader is a copy of a prepared message with its own header (the
// pixel data is shared and never written).
func withHeader(msg any, h std_msgs.Header) any {
	switch m := msg.(type) {
	case *sensor_msgs.CompressedImage:
		c := *m
		c.Header = h
		return &c
	case *sensor_msgs.Image:
		c := *m
		c.Header = h
		return &c
	}
	panic(fmt.Sprintf("bench: unexpected frame message %T", msg))
}

// frameRecord is one frame's figures, in milliseconds.
type frameRecord struct {
	Seq uint64 `json:"seq"`
	OK  bool   `json:"ok"`
	// Reported is false for a frame the node dropped (never delivered).
	Reported  bool    `json:"reported"`
	Window    int     `json:"window"`
	Kind      string  `json:"kind"`
	LatencyMs float64 `json:"latency_ms"` // frame in → pose written
	PoseAtMs  float64 `json:"pose_at_ms"` // pose written, from the first frame sent
	QueueMs   float64 `json:"queue_ms"`
	PrepareMs float64 `json:"prepare_ms"`
	AheadMs   float64 `json:"ahead_ms"`
	ModelMs   float64 `json:"model_ms"`
	PostMs    float64 `json:"post_ms"`
	DeliverMs float64 `json:"deliver_ms"`
}

// memSample is the memory after a number of delivered frames.
type memSample struct {
	Frames     int     `json:"frames"`
	Window     int     `json:"window"`
	DeviceMB   float64 `json:"device_mb"`
	DevicePeak float64 `json:"device_peak_mb"`
	GoHeapMB   float64 `json:"go_heap_mb"`
	RSSMB      float64 `json:"rss_mb"`
	RSSPeakMB  float64 `json:"rss_peak_mb"`
	// DeviceParts splits the device memory held by use, where the backend
	// says (weights, kv, activations, cached_free).
	DeviceParts []deviceMB `json:"device_parts,omitempty"`
	deviceKnown bool
}

// deviceMB is a named share of the device memory held.
type deviceMB struct {
	Name string  `json:"name"`
	MB   float64 `json:"mb"`
}

// pipelineRecord is what --json writes.
type pipelineRecord struct {
	Device      string  `json:"device"`
	Precision   string  `json:"precision"`
	Model       string  `json:"model"`
	Encoding    string  `json:"encoding"`
	CameraSize  string  `json:"camera_size"`
	ModelInput  string  `json:"model_input"`
	Rate        float64 `json:"rate"`
	Policy      string  `json:"policy"`
	Queue       int     `json:"queue"`
	Windowed    bool    `json:"windowed"`
	WindowSize  int     `json:"window_size"`
	OverlapSize int     `json:"overlap_size"`
	KFInterval  int     `json:"keyframe_interval"`
	Warmup      int     `json:"warmup"`
	CPUThreads  int     `json:"cpu_threads"`

	FramesIn      int     `json:"frames_in"`
	FramesOut     int     `json:"frames_out"`
	Dropped       int     `json:"frames_dropped"`
	Failed        int     `json:"frames_failed"`
	WallS         float64 `json:"wall_s"`
	ThroughputFPS float64 `json:"throughput_fps"`
	// TimedFPS is the poses per second between the first and the last pose
	// of the frames after the warm-up (model loading, kernel compiles and
	// the first phase 1 left out, as bench leaves them out).
	TimedFPS    float64 `json:"timed_throughput_fps"`
	TimedFrames int     `json:"timed_frames"`
	// PointsDeviceFrames and PointsHostFrames count the keyframes whose
	// cloud was unprojected on the device and on the host, when the sender
	// stopped (-1: not reported).
	PointsDeviceFrames int `json:"points_device_frames"`
	PointsHostFrames   int `json:"points_host_frames"`
	// TimedDropped are the frames after the warm-up the node dropped.
	TimedDropped int `json:"timed_frames_dropped"`

	LatencyP50Ms float64 `json:"latency_p50_ms"`
	LatencyP99Ms float64 `json:"latency_p99_ms"`
	LatencyMaxMs float64 `json:"latency_max_ms"`
	// P99Periods is p99 latency in frame periods (paced runs).
	P99Periods float64 `json:"latency_p99_periods,omitempty"`
	// ModelThread is where the model's goroutine spent the run until the
	// last frame was sent (from /diagnostics).
	ModelThread modelThread `json:"model_thread"`
	// StageMedianMs: queue, prepare, ahead, model, post, deliver.
	StageMedianMs map[string]float64 `json:"stage_median_ms"`

	// ModelFirstMs and ModelLastMs are the median model times of the first
	// and last (up to) 1000 timed frames, which never overlap.
	ModelFirstMs float64 `json:"model_first_ms"`
	ModelLastMs  float64 `json:"model_last_ms"`
	ModelRatio   float64 `json:"model_last_over_first"`
	ModelSpan    int     `json:"model_span_frames"`

	// Held memory after the first window: device memory where the backend
	// tracks it, else the resident set.
	HeldWhat      string  `json:"held_memory"`
	HeldMinMB     float64 `json:"held_min_mb"`
	HeldMaxMB     float64 `json:"held_max_mb"`
	HeldVariation float64 `json:"held_variation_pct"`

	Boundaries         int     `json:"window_boundaries"`
	BoundaryWorstMs    float64 `json:"boundary_worst_latency_ms"`
	BoundaryWorstRatio float64 `json:"boundary_worst_over_median"`

	Memory []memSample   `json:"memory"`
	Frames []frameRecord `json:"frame_records"`
}

func ms(d time.Duration) float64 { return d.Seconds() * 1e3 }

// runBenchPipeline is bench --pipeline.
func runBenchPipeline(ctx context.Context, o *benchOptions, out io.Writer) error {
	p := o.pipe
	if o.frames < 1 {
		return &exitCodeError{code: exitUsage, err: errors.New("--frames must be ≥ 1")}
	}
	if !(p.rate >= 0) || math.IsInf(p.rate, 0) {
		return &exitCodeError{code: exitUsage, err: fmt.Errorf("--frame-rate must be ≥ 0 frames/s, not %g", p.rate)}
	}
	if o.warmup < 0 || o.memEvery < 0 {
		return &exitCodeError{code: exitUsage, err: errors.New("--warmup and --mem-every must be ≥ 0")}
	}
	cw, ch, err := parseSize(p.size)
	if err != nil {
		return &exitCodeError{code: exitUsage, err: err}
	}
	nc := o.node
	nc.Engine = o.cfg
	if !nc.Engine.Windowed && !o.maxFramesGiven {
		nc.Engine.MaxFrames = max(nc.Engine.MaxFrames, o.frames+nc.Engine.ScaleFrames+1)
	}
	switch p.encoding {
	case "jpeg", "png":
		nc.ImageTransport = "compressed"
	case "raw":
		nc.ImageTransport = "raw"
	default:
		return &exitCodeError{code: exitUsage, err: fmt.Errorf("--encoding %q: want jpeg, png or raw", p.encoding)}
	}
	if p.rate == 0 {
		nc.QueuePolicy = "all" // every frame, as fast as the node takes them
	}
	nc.DiagnosticsRate = 20
	nc.Replay = ""
	if err := nc.Validate(); err != nil {
		return &exitCodeError{code: exitUsage, err: err}
	}
	if err := engine.CheckFrameSize(cw, ch, nc.Engine.ImageWidth); err != nil {
		return &exitCodeError{code: exitUsage, err: fmt.Errorf("--pipeline-size: %w", err)}
	}
	msgs, err := cameraFrames(p.images, cw, ch, p.encoding)
	if err != nil {
		return err
	}
	if !(o.traceSeconds > 0) || math.IsInf(o.traceSeconds, 0) {
		return &exitCodeError{code: exitUsage, err: fmt.Errorf("--trace-seconds must be > 0, not %g", o.traceSeconds)}
	}
	prof, err := newProfiles(o.cpuProfile, o.tracePath)
	if err != nil {
		return err
	}
	// a failed run still ends the recordings; its own error wins
	defer func() { _ = prof.stop() }()

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	tr := newBenchTransport("/lingbotmap")
	meter := newBenchMeter(o.frames, o.memEvery)
	t0 := time.Now()
	n, err := node.New(node.Options{Config: nc, Transport: tr, Log: log, Observe: meter.Add,
		NewStream: func(ctx context.Context, c node.Config) (engine.Stream, error) {
			s, err := newEngineStream(ctx, c.Engine, log)
			if err == nil {
				meter.setStream(s, time.Since(t0))
			}
			return s, err
		}})
	if err != nil {
		return &exitCodeError{code: exitUsage, err: err}
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)
	go func() { runErr <- n.Run(runCtx) }()
	topic := tr.Resolve("image")
	if p.encoding != "raw" {
		topic += "/compressed"
	}
	for !tr.subscribed(topic) {
		select {
		case err := <-runErr:
			if err == nil {
				err = ctx.Err()
			}
			return err
		case <-time.After(2 * time.Millisecond):
		}
	}
	e := nc.Engine
	policy := "all (every frame)"
	if nc.QueuePolicy == "latest" {
		policy = "latest (drop the oldest waiting)"
	}
	mw, mh := modelInput(cw, ch, e.ImageWidth)
	fmt.Fprintf(out, "bench --pipeline: device %s (%s), model %s, %d CPU threads, model load %.2f s\n",
		e.Device, e.ComputePrecision(), firstNonEmpty(e.Weights, "random "+e.ModelSize), runtime.GOMAXPROCS(0), meter.loadTime().Seconds())
	fmt.Fprintf(out, "frames: %d, %s %d×%d → model %d×%d, from %s (%d pictures, cycled)\n", o.frames, p.encoding, cw, ch, mw, mh, p.images, len(msgs))
	rateText := "as fast as the node takes them"
	if p.rate > 0 {
		rateText = fmt.Sprintf("paced at %g frames/s", p.rate)
	}
	fmt.Fprintf(out, "input: %s; queue %d, policy %s\n", rateText, nc.QueueSize, policy)
	if e.Windowed {
		fmt.Fprintf(out, "schedule: windowed, window %d, overlap %d, keyframe interval %d, %d scale frames\n", e.WindowSize, e.OverlapSize, e.KeyframeInterval, e.ScaleFrames)
	} else {
		fmt.Fprintf(out, "schedule: streaming, sliding window %d, keyframe interval %d, %d scale frames, max_frames %d\n", e.SlidingWindow, e.KeyframeInterval, e.ScaleFrames, e.MaxFrames)
	}

	// the camera
	start := time.Now()
	meter.began(start)
	var sendErr error
	for i := 0; i < o.frames; i++ {
		if p.rate > 0 {
			due := start.Add(time.Duration(float64(i) / p.rate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
				}
			}
		}
		if ctx.Err() != nil {
			sendErr = ctx.Err()
			break
		}
		if i == min(o.warmup, o.frames-1) {
			// the recordings cover the timed frames, for a bounded time
			if err := prof.start(); err != nil {
				sendErr = err
				break
			}
			time.AfterFunc(time.Duration(o.traceSeconds*float64(time.Second)), func() { _ = prof.stop() })
		}
		stamp := time.Unix(1_700_000_000, 0).Add(time.Duration(i) * time.Second / 30)
		msg := withHeader(msgs[i%len(msgs)], std_msgs.Header{Seq: uint32(i), Stamp: stamp, FrameId: "camera"})
		if err := tr.deliver(topic, msg); err != nil {
			sendErr = err
			break
		}
	}
	sent := time.Now()
	// frames_dropped is final once the sender stopped: wait for a report
	// made after that
	dropped, ptsDevice, ptsHost := -1, -1, -1
	var thread modelThread
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && sendErr == nil; time.Sleep(5 * time.Millisecond) {
		m, at := tr.newest("/diagnostics")
		if d, ok := m.(*diagnostic_msgs.DiagnosticArray); ok && at.After(sent) {
			dropped = diagInt(d, "frames_dropped")
			ptsDevice, ptsHost = diagInt(d, "points_device_frames"), diagInt(d, "points_host_frames")
			thread = modelThreadOf(d, at.Sub(start))
			break
		}
	}
	stop() // the node finishes what it holds: the queue, the engine's flush
	if err := <-runErr; err != nil {
		return err
	}
	end := time.Now()
	if sendErr != nil {
		return sendErr
	}
	if err := prof.stop(); err != nil {
		return err
	}
	if dropped < 0 {
		return errors.New("bench: the node reported no frames_dropped in /diagnostics after the last frame")
	}

	rec := pipelineRecord{
		Device: e.Device, Precision: e.ComputePrecision(), Model: firstNonEmpty(e.Weights, "random "+e.ModelSize),
		Encoding: p.encoding, CameraSize: fmt.Sprintf("%dx%d", cw, ch), ModelInput: fmt.Sprintf("%dx%d", mw, mh),
		Rate: p.rate, Policy: nc.QueuePolicy, Queue: nc.QueueSize, Windowed: e.Windowed, WindowSize: e.WindowSize,
		OverlapSize: e.OverlapSize, KFInterval: e.KeyframeInterval, Warmup: o.warmup, CPUThreads: runtime.GOMAXPROCS(0),
		FramesIn: o.frames, Dropped: dropped, Memory: meter.mem, Frames: meter.recs, ModelThread: thread,
		PointsDeviceFrames: ptsDevice, PointsHostFrames: ptsHost,
	}
	recs := meter.recs
	for i := range recs {
		recs[i].Seq = uint64(i) // a dropped frame was never reported
		if recs[i].OK {
			rec.FramesOut++
		}
	}
	rec.Failed = failedFrames(recs, dropped)
	rec.WallS = end.Sub(start).Seconds()
	if rec.WallS > 0 {
		rec.ThroughputFPS = float64(rec.FramesOut) / rec.WallS
	}
	rec.TimedFPS, rec.TimedFrames = timedThroughput(recs, o.warmup)
	for _, r := range recs[min(o.warmup, len(recs)):] {
		if !r.Reported {
			rec.TimedDropped++
		}
	}
	summarize(&rec, recs, o.warmup, p.rate)
	heldAfterFirstWindow(&rec, meter.mem)
	writePipelineReport(out, &rec)
	if p.jsonOut != "" {
		js, err := json.MarshalIndent(&rec, "", " ")
		if err != nil {
			return err
		}
		if err := atomicfile.WriteFile(p.jsonOut, func(w io.Writer) error { _, err := w.Write(js); return err }); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
		fmt.Fprintf(out, "record: %s\n", p.jsonOut)
	}
	return nil
}

// timedThroughput is the pose rate of the frames after the warm-up: poses
// after the first timed one over the time from it to the last.
func timedThroughput(recs []frameRecord, warmup int) (fps float64, frames int) {
	first, last := math.Inf(1), math.Inf(-1)
	for _, r := range recs[min(warmup, len(recs)):] {
		if r.OK {
			frames++
			first, last = min(first, r.PoseAtMs), max(last, r.PoseAtMs)
		}
	}
	if frames < 2 || !(last > first) {
		return 0, frames
	}
	return float64(frames-1) / ((last - first) / 1e3), frames
}

// modelInput is the model's input size for a w×h camera (landscape: width
// imageWidth, height scaled and rounded to the patch size, as the engine does).
func modelInput(w, h, imageWidth int) (int, int) {
	mw, mh, _ := preprocess.TargetSize(w, h, imageWidth, 14)
	return mw, mh
}

// failedFrames counts the frames that neither gave a pose nor were dropped.
func failedFrames(recs []frameRecord, dropped int) int {
	ok := 0
	for _, r := range recs {
		if r.OK {
			ok++
		}
	}
	return len(recs) - ok - dropped
}

// modelThread is the share of the wall time the model's goroutine spent in
// the engine, waiting for prepared frames and held back by the stages after
// it, in per cent; the rest is its own bookkeeping.
type modelThread struct {
	BusyPct   float64 `json:"busy_pct"`
	InputPct  float64 `json:"wait_input_pct"`
	OutputPct float64 `json:"wait_output_pct"`
}

func modelThreadOf(d *diagnostic_msgs.DiagnosticArray, wall time.Duration) modelThread {
	pct := func(key string) float64 {
		if len(d.Status) == 0 || wall <= 0 {
			return 0
		}
		for _, kv := range d.Status[0].Values {
			if kv.Key == key {
				v, _ := strconv.ParseFloat(kv.Value, 64)
				return 100 * v / wall.Seconds()
			}
		}
		return 0
	}
	return modelThread{BusyPct: pct("model_busy_s"), InputPct: pct("model_wait_input_s"), OutputPct: pct("model_wait_output_s")}
}

func diagInt(d *diagnostic_msgs.DiagnosticArray, key string) int {
	if len(d.Status) == 0 {
		return -1
	}
	for _, kv := range d.Status[0].Values {
		if kv.Key == key {
			v, err := strconv.Atoi(kv.Value)
			if err != nil {
				return -1
			}
			return v
		}
	}
	return -1
}

// quantile of sorted values (nearest rank).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// median of any float values (nearest rank).
func median[T ~float32 | ~float64](v []T) float64 {
	s := make([]float64, len(v))
	for i, x := range v {
		s[i] = float64(x)
	}
	slices.Sort(s)
	return quantile(s, 0.5)
}

// summarize fills the latency, stage, drift and window-boundary figures from
// the frames after the warm-up that gave a pose.
func summarize(rec *pipelineRecord, recs []frameRecord, warmup int, rate float64) {
	var timed []frameRecord
	for _, r := range recs[min(warmup, len(recs)):] {
		if r.OK {
			timed = append(timed, r)
		}
	}
	if len(timed) == 0 {
		return
	}
	col := func(f func(frameRecord) float64, rs []frameRecord) []float64 {
		out := make([]float64, len(rs))
		for i, r := range rs {
			out[i] = f(r)
		}
		return out
	}
	lat := col(func(r frameRecord) float64 { return r.LatencyMs }, timed)
	slices.Sort(lat)
	rec.LatencyP50Ms, rec.LatencyP99Ms, rec.LatencyMaxMs = quantile(lat, 0.5), quantile(lat, 0.99), lat[len(lat)-1]
	if rate > 0 {
		rec.P99Periods = rec.LatencyP99Ms / (1e3 / rate)
	}
	rec.StageMedianMs = map[string]float64{
		"queue":   median(col(func(r frameRecord) float64 { return r.QueueMs }, timed)),
		"prepare": median(col(func(r frameRecord) float64 { return r.PrepareMs }, timed)),
		"ahead":   median(col(func(r frameRecord) float64 { return r.AheadMs }, timed)),
		"model":   median(col(func(r frameRecord) float64 { return r.ModelMs }, timed)),
		"post":    median(col(func(r frameRecord) float64 { return r.PostMs }, timed)),
		"deliver": median(col(func(r frameRecord) float64 { return r.DeliverMs }, timed)),
	}
	// model time drift: the first and the last (up to) 1000 timed frames
	span := min(1000, len(timed)/2)
	if span > 0 {
		model := col(func(r frameRecord) float64 { return r.ModelMs }, timed)
		rec.ModelSpan = span
		rec.ModelFirstMs, rec.ModelLastMs = median(model[:span]), median(model[len(model)-span:])
		if rec.ModelFirstMs > 0 {
			rec.ModelRatio = rec.ModelLastMs / rec.ModelFirstMs
		}
	}
	// window boundaries: the worst latency of the frames around a window
	// change: the last ones of the old window (they carry the end of the
	// warm-up) and those that waited behind the change
	worst := 0.0
	for i := 1; i < len(timed); i++ {
		if timed[i].Window == timed[i-1].Window {
			continue
		}
		rec.Boundaries++
		for j := max(i-boundaryBefore, 0); j < min(i+boundaryAfter, len(timed)); j++ {
			worst = max(worst, timed[j].LatencyMs)
		}
	}
	if rec.Boundaries > 0 {
		rec.BoundaryWorstMs = worst
		if rec.LatencyP50Ms > 0 {
			rec.BoundaryWorstRatio = worst / rec.LatencyP50Ms
		}
	}
}

// The frames around a window change that count for its latency.
const boundaryBefore, boundaryAfter = 4, 8

// heldAfterFirstWindow fills the held-memory figures from the samples taken
// after the first window (device memory where tracked, else the RSS).
func heldAfterFirstWindow(rec *pipelineRecord, mem []memSample) {
	var v []float64
	what := "process RSS"
	for _, s := range mem {
		if s.Window < 1 {
			continue
		}
		if s.deviceKnown {
			what = "device memory held"
			v = append(v, s.DeviceMB)
		} else {
			v = append(v, s.RSSMB)
		}
	}
	if len(v) == 0 {
		return
	}
	rec.HeldWhat = what
	rec.HeldMinMB, rec.HeldMaxMB = slices.Min(v), slices.Max(v)
	if rec.HeldMinMB > 0 {
		rec.HeldVariation = 100 * (rec.HeldMaxMB - rec.HeldMinMB) / rec.HeldMinMB
	}
}

// writePipelineReport prints the record as a readable table.
func writePipelineReport(out io.Writer, r *pipelineRecord) {
	fmt.Fprintf(out, "frames in %d, out %d, dropped %d, failed %d\n", r.FramesIn, r.FramesOut, r.Dropped, r.Failed)
	fmt.Fprintf(out, "throughput: %.2f frames/s (%d poses in %.2f s of wall time)\n", r.ThroughputFPS, r.FramesOut, r.WallS)
	if r.TimedFPS > 0 {
		fmt.Fprintf(out, "throughput after the %d warm-up frames: %.2f frames/s (%d poses; %d of those frames dropped)\n", r.Warmup, r.TimedFPS, r.TimedFrames, r.TimedDropped)
	}
	if r.PointsDeviceFrames >= 0 {
		fmt.Fprintf(out, "clouds made on the device for %d keyframes, on the host for %d (when the camera stopped)\n", r.PointsDeviceFrames, r.PointsHostFrames)
	}
	t := r.ModelThread
	fmt.Fprintf(out, "model thread: %.1f %% in the engine, %.1f %% waiting for frames, %.1f %% held back by the stages after it\n", t.BusyPct, t.InputPct, t.OutputPct)
	if r.StageMedianMs == nil {
		fmt.Fprintf(out, "no frame after the %d warm-up frames gave a pose\n", r.Warmup)
		return
	}
	line := fmt.Sprintf("latency frame in → pose out: p50 %.1f ms, p99 %.1f ms, max %.1f ms", r.LatencyP50Ms, r.LatencyP99Ms, r.LatencyMaxMs)
	if r.P99Periods > 0 {
		line += fmt.Sprintf(" (p99 = %.2f frame periods)", r.P99Periods)
	}
	fmt.Fprintln(out, line)
	fmt.Fprintf(out, "stage medians (ms): queue %.2f | prepare %.2f | ahead %.2f | model %.2f | post %.2f | deliver %.2f\n",
		r.StageMedianMs["queue"], r.StageMedianMs["prepare"], r.StageMedianMs["ahead"], r.StageMedianMs["model"], r.StageMedianMs["post"], r.StageMedianMs["deliver"])
	if r.ModelSpan > 0 {
		fmt.Fprintf(out, "model time: median %.2f ms over the first %d timed frames, %.2f ms over the last %d: ratio %.3f\n",
			r.ModelFirstMs, r.ModelSpan, r.ModelLastMs, r.ModelSpan, r.ModelRatio)
	}
	if r.Boundaries > 0 {
		fmt.Fprintf(out, "window boundaries: %d; worst latency from %d frames before one to %d after it %.1f ms = %.2f× the median\n",
			r.Boundaries, boundaryBefore, boundaryAfter-1, r.BoundaryWorstMs, r.BoundaryWorstRatio)
	}
	if len(r.Memory) > 0 {
		fmt.Fprintln(out, "memory (MB):")
		fmt.Fprintf(out, "  %8s %7s %12s %12s %9s %9s %9s\n", "frames", "window", "device held", "device peak", "Go heap", "RSS", "RSS peak")
		for _, s := range r.Memory {
			dev, peak := "-", "-"
			if s.deviceKnown {
				dev, peak = fmt.Sprintf("%.1f", s.DeviceMB), fmt.Sprintf("%.1f", s.DevicePeak)
			}
			var parts []string
			for _, d := range s.DeviceParts {
				parts = append(parts, fmt.Sprintf("%s %.1f", d.Name, d.MB))
			}
			fmt.Fprintf(out, "  %8d %7d %12s %12s %9.1f %9.1f %9.1f  %s\n", s.Frames, s.Window, dev, peak, s.GoHeapMB, s.RSSMB, s.RSSPeakMB, strings.Join(parts, ", "))
		}
	}
	if r.HeldWhat != "" {
		fmt.Fprintf(out, "held after the first window (%s): min %.1f MB, max %.1f MB, variation %.2f %%\n", r.HeldWhat, r.HeldMinMB, r.HeldMaxMB, r.HeldVariation)
	}
}
