package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"reflect"
	"time"

	"github.com/lingbotmap/lingbotmap/engine/binstate"
	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/model"
	"github.com/lingbotmap/lingbotmap/engine/weights"
)

// A session state file holds a Stream's whole state, so that a later
// process continues the stream as if it had never stopped:
//
//	magic      8 bytes "LBMSTATE"
//	version    uint32 (StateVersion)
//	header     uint32 length, then JSON: the Fingerprint
//	model      the model's caches (model.SaveState): resolution, RoPE
//	           counter, KV page bookkeeping, K and V of the pages in use,
//	           camera head caches
//	stream     counters, the current window (phase-1 buffer, keyframe
//	           reference, overlap inputs, unaligned results, re-run and gap
//	           frames), held results, the last inputs (live windows), the
//	           previous window's tail and the window similarities
//	checksum   uint32 CRC-32C of everything after the header
//
// All numbers are little-endian; lengths are int64, −1 for nil.

// StateVersion is the state file format this build writes and reads.
const StateVersion = 3

var stateMagic = [8]byte{'L', 'B', 'M', 'S', 'T', 'A', 'T', 'E'}

// maxHeader bounds the JSON header a state file may declare.
const maxHeader = 1 << 16

// ErrStateMismatch is returned when a state file was saved by another model,
// other settings, another backend or precision, or another format version.
var ErrStateMismatch = errors.New("engine: the session state does not fit this stream")

// Snapshotter is a Stream that can save its whole state (New's streams are).
type Snapshotter interface {
	// SaveState writes the state file to w. Call it between Push calls.
	SaveState(w io.Writer) error
}

var _ Snapshotter = (*stream)(nil)

// Fingerprint names what a state belongs to; a state is restored only into a
// stream with an equal fingerprint.
type Fingerprint struct {
	Backend   string      `json:"backend"`
	Precision string      `json:"precision"`
	Sizes     model.Sizes `json:"sizes"`
	// Weights is a SHA-256 over the checkpoint's key, dtype and shape table
	// and a sample of every tensor's bytes (its first and last 64), or over
	// the table and the seed of a random model.
	Weights string `json:"weights"`
	// Settings are the configuration values that change results, by key.
	Settings map[string]string `json:"settings"`
	// InputWidth and InputHeight are the model resolution the stream runs
	// at (0 before its first frame); the state's caches are sized for it.
	InputWidth  int `json:"input_width"`
	InputHeight int `json:"input_height"`
}

// resultSettings lists the settings that change results or the cache layout.
func resultSettings(c Config) map[string]string {
	return map[string]string{
		"image_width":          fmt.Sprint(c.ImageWidth),
		"scale_frames":         fmt.Sprint(c.ScaleFrames),
		"sliding_window":       fmt.Sprint(c.SlidingWindow),
		"max_frames":           fmt.Sprint(c.MaxFrames),
		"cache_headroom":       fmt.Sprint(c.CacheHeadroom),
		"camera_iterations":    fmt.Sprint(c.CameraIterations),
		"selected_layers":      fmt.Sprint(c.SelectedLayers),
		"keyframe_interval":    fmt.Sprint(c.KeyframeInterval),
		"flow_threshold":       fmt.Sprint(c.FlowThreshold),
		"max_non_keyframe_gap": fmt.Sprint(c.MaxNonKeyframeGap),
		"windowed":             fmt.Sprint(c.Windowed),
		"window_size":          fmt.Sprint(c.WindowSize),
		"overlap_size":         fmt.Sprint(c.OverlapSize),
		"window_mode":          c.WindowMode,
		"cuda.exact_attention": fmt.Sprint(c.CUDA.ExactAttention && c.Device == "cuda"),
	}
}

// weightsFingerprint hashes a store's table and a sample of its bytes.
func weightsFingerprint(cfg Config, s weights.Store) (string, error) {
	h := sha256.New()
	if cfg.Weights == "" {
		fmt.Fprintf(h, "random %s seed %d\n", cfg.ModelSize, cfg.Seed)
	}
	raw, _ := s.(weights.RawReader)
	for _, k := range s.Keys() {
		inf, _ := s.Info(k)
		fmt.Fprintf(h, "%s %s %v\n", k, inf.DType, inf.Shape)
		if raw == nil || cfg.Weights == "" {
			continue
		}
		b, err := raw.RawBytes(k)
		if err != nil {
			return "", fmt.Errorf("engine: fingerprinting %s: %w", k, err)
		}
		n := min(len(b), 64)
		h.Write(b[:n])
		h.Write(b[len(b)-n:])
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func (s *stream) fingerprint() Fingerprint {
	return Fingerprint{
		Backend:   s.be.Name(),
		Precision: s.cfg.ComputePrecision(),
		Sizes:     s.m.Sizes(),
		Weights:   s.weightsID,
		Settings:  resultSettings(s.cfg),
		// the model's resolution, which phase 1 may fix before the stream's
		InputWidth: s.m.Width(), InputHeight: s.m.Height(),
	}
}

// mismatch names the first difference between a saved fingerprint and ours.
func (f Fingerprint) mismatch(saved Fingerprint) error {
	switch {
	case saved.Backend != f.Backend:
		return fmt.Errorf("%w: saved by the %s backend, this stream runs on %s", ErrStateMismatch, saved.Backend, f.Backend)
	case saved.Precision != f.Precision:
		return fmt.Errorf("%w: saved at %s precision, this stream computes in %s", ErrStateMismatch, saved.Precision, f.Precision)
	case !reflect.DeepEqual(saved.Sizes, f.Sizes):
		return fmt.Errorf("%w: saved for another model architecture (%+v), this model is %+v", ErrStateMismatch, saved.Sizes, f.Sizes)
	case saved.Weights != f.Weights:
		return fmt.Errorf("%w: saved with other weights (fingerprint %.12s…, these weights %.12s…)", ErrStateMismatch, saved.Weights, f.Weights)
	}
	for k, v := range f.Settings {
		if sv, ok := saved.Settings[k]; !ok || sv != v {
			return fmt.Errorf("%w: saved with %s = %q, this stream has %q", ErrStateMismatch, k, sv, v)
		}
	}
	return nil
}

// SaveState writes the stream's whole state to w.
func (s *stream) SaveState(w io.Writer) error {
	if s.closed {
		return errors.New("engine: SaveState on a closed stream")
	}
	hdr, err := json.Marshal(s.fingerprint())
	if err != nil {
		return fmt.Errorf("engine: state header: %w", err)
	}
	var pre bytes.Buffer
	pre.Write(stateMagic[:])
	binary.Write(&pre, binary.LittleEndian, uint32(StateVersion))
	binary.Write(&pre, binary.LittleEndian, uint32(len(hdr)))
	pre.Write(hdr)
	if _, err := w.Write(pre.Bytes()); err != nil {
		return fmt.Errorf("engine: writing state: %w", err)
	}
	sum := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	bw := binstate.NewWriter(io.MultiWriter(w, sum))
	if err := s.m.SaveState(bw); err != nil {
		return fmt.Errorf("engine: saving state: %w", err)
	}
	// a GPU's copies to the host report failures only here
	if err := s.deviceErr(); err != nil {
		return fmt.Errorf("engine: saving state: %w", err)
	}
	s.saveStream(bw)
	bw.U32(sum.Sum32())
	if err := bw.Err(); err != nil {
		return fmt.Errorf("engine: writing state: %w", err)
	}
	return nil
}

// ReadStateHeader reads a state file's magic, version and fingerprint,
// refusing other files and versions with the reason.
func ReadStateHeader(r io.Reader) (Fingerprint, error) {
	var pre [16]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return Fingerprint{}, fmt.Errorf("engine: not a session state file: %d-byte header missing: %w", len(pre), err)
	}
	if !bytes.Equal(pre[:8], stateMagic[:]) {
		return Fingerprint{}, fmt.Errorf("engine: not a session state file (magic %q)", pre[:8])
	}
	if v := binary.LittleEndian.Uint32(pre[8:12]); v != StateVersion {
		return Fingerprint{}, fmt.Errorf("%w: state format version %d, this build reads version %d", ErrStateMismatch, v, StateVersion)
	}
	n := binary.LittleEndian.Uint32(pre[12:16])
	if n > maxHeader {
		return Fingerprint{}, fmt.Errorf("engine: state header of %d bytes is over the %d-byte limit", n, maxHeader)
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return Fingerprint{}, fmt.Errorf("engine: state header truncated: %w", err)
	}
	var f Fingerprint
	dec := json.NewDecoder(bytes.NewReader(hdr))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Fingerprint{}, fmt.Errorf("engine: state header: %w", err)
	}
	if f.InputWidth != 0 || f.InputHeight != 0 {
		if err := CheckInputSize(f.InputWidth, f.InputHeight); err != nil {
			return Fingerprint{}, fmt.Errorf("engine: state header: %w", err)
		}
	}
	return f, nil
}

// Resume builds a stream as New does and restores the state r holds, saved
// by SaveState of a stream with the same weights and result settings.
func Resume(ctx context.Context, cfg Config, newBackend BackendFactory, r io.Reader, log *slog.Logger) (Stream, error) {
	saved, err := ReadStateHeader(r)
	if err != nil {
		return nil, err
	}
	st, err := New(ctx, cfg, newBackend, log)
	if err != nil {
		return nil, err
	}
	s := st.(*stream)
	if err := s.fingerprint().mismatch(saved); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.loadBody(r, saved); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// loadBody restores the model and stream state that follows a header.
func (s *stream) loadBody(r io.Reader, saved Fingerprint) error {
	sum := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	br := binstate.NewReader(io.TeeReader(r, sum))
	// the caches are sized before anything else is read: only for the
	// resolution the header names, which was checked against the bounds
	sized := func(h, w int) error {
		if w != saved.InputWidth || h != saved.InputHeight {
			return fmt.Errorf("%w: the caches are for %d×%d, the header says %d×%d", binstate.ErrCorrupt, w, h, saved.InputWidth, saved.InputHeight)
		}
		return nil
	}
	if err := s.m.LoadState(br, sized); err != nil {
		return fmt.Errorf("engine: restoring state: %w", err)
	}
	s.loadStream(br)
	if err := br.Err(); err != nil {
		return fmt.Errorf("engine: restoring state: %w", err)
	}
	want := sum.Sum32()
	var tail [4]byte
	if _, err := io.ReadFull(r, tail[:]); err != nil {
		return fmt.Errorf("engine: restoring state: checksum missing (truncated file): %w", err)
	}
	if got := binary.LittleEndian.Uint32(tail[:]); got != want {
		return fmt.Errorf("engine: restoring state: %w: checksum %08x, content gives %08x", binstate.ErrCorrupt, got, want)
	}
	return nil
}

// --- the stream's own state ---

func (s *stream) saveStream(w *binstate.Writer) {
	w.Int(s.h)
	w.Int(s.w)
	w.I64(s.framesIn)
	w.Int(s.flowDecs)
	win := s.win
	w.Int(win.index)
	w.Int(win.scaleN)
	w.Int(win.n)
	w.Int(win.kfs)
	w.F32Raw(win.lastKF[:])
	w.Int(win.lastKn)
	saveSim(w, win.sim)
	w.Bool(win.aligned)
	saveInputs(w, win.buf)
	saveResults(w, win.raw)
	saveInputs(w, win.tail)
	w.Int(win.rerun)
	w.Int(win.gap)
	saveResults(w, s.held)
	saveInputs(w, s.recent)
	w.Bool(s.prevTail != nil)
	if s.prevTail != nil {
		pt := s.prevTail
		w.Int(len(pt.PoseEnc))
		for _, p := range pt.PoseEnc {
			w.F32Raw(p[:])
		}
		w.Bool(pt.Depth != nil)
		if pt.Depth != nil {
			for _, d := range pt.Depth {
				w.F32s(d)
			}
		}
		w.Bool(pt.Keyframe != nil)
		for _, k := range pt.Keyframe {
			w.Bool(k)
		}
	}
	w.Int(len(s.sims))
	for _, sim := range s.sims {
		saveSim(w, sim)
	}
}

// maxListFrames bounds the per-list frame counts a state file may declare.
const maxListFrames = 1 << 16

func (s *stream) loadStream(r *binstate.Reader) {
	s.h = r.Int("stream height", 0, 1<<14)
	s.w = r.Int("stream width", 0, 1<<14)
	s.framesIn = r.I64()
	s.flowDecs = r.Int("flow decisions", 0, 1<<40)
	if st := s.m.Stats(); r.Err() == nil && st.FrameCount > 0 && s.h*s.w == 0 {
		r.Fail(fmt.Errorf("%w: cached frames without a resolution", binstate.ErrCorrupt))
	}
	px := 3 * s.h * s.w
	win := s.newWindow(r.Int("window index", 0, 1<<40))
	win.scaleN = r.Int("window scale frames", 0, s.cfg.ScaleFrames)
	win.n = r.Int("window frames", 0, 1<<40)
	win.kfs = r.Int("window keyframes", 0, 1<<40)
	r.F32Raw(win.lastKF[:])
	win.lastKn = r.Int("last keyframe", -1, 1<<40)
	win.sim = loadSim(r)
	win.aligned = r.Bool("window aligned")
	win.buf = loadInputs(r, px, s.cfg.ScaleFrames)
	win.raw = loadResults(r, s.h, s.w)
	win.tail = loadInputs(r, px, max(s.cfg.OverlapSize, 0))
	win.rerun = r.Int("re-run frames", 0, max(s.cfg.OverlapSize, 0))
	win.gap = r.Int("gap frames", 0, max(s.cfg.OverlapSize, 0))
	s.win = win
	s.held = loadResults(r, s.h, s.w)
	s.recent = loadInputs(r, px, max(s.cfg.OverlapSize, 0))
	s.prevTail = nil
	if r.Bool("previous tail") {
		n := r.Int("previous tail frames", 0, maxListFrames)
		pt := &geom.WindowFrames{}
		for i := 0; i < n && r.Err() == nil; i++ {
			var p [9]float32
			r.F32Raw(p[:])
			pt.PoseEnc = append(pt.PoseEnc, p)
		}
		if r.Bool("previous tail depth") {
			for i := 0; i < n && r.Err() == nil; i++ {
				pt.Depth = append(pt.Depth, r.F32s("previous tail depth", s.h*s.w))
			}
		}
		if r.Bool("previous tail keyframes") {
			pt.Keyframe = make([]bool, 0, n)
			for i := 0; i < n && r.Err() == nil; i++ {
				pt.Keyframe = append(pt.Keyframe, r.Bool("keyframe flag"))
			}
		}
		s.prevTail = pt
	}
	n := r.Int("window similarities", 0, maxListFrames)
	s.sims = nil
	for i := 0; i < n && r.Err() == nil; i++ {
		s.sims = append(s.sims, loadSim(r))
	}
}

func saveSim(w *binstate.Writer, sim geom.Similarity) {
	w.F64(sim.Scale)
	for _, row := range sim.R {
		for _, v := range row {
			w.F64(v)
		}
	}
	for _, v := range sim.T {
		w.F64(v)
	}
}

func loadSim(r *binstate.Reader) geom.Similarity {
	var sim geom.Similarity
	sim.Scale = r.F64()
	for i := range sim.R {
		for j := range sim.R[i] {
			sim.R[i][j] = r.F64()
		}
	}
	for i := range sim.T {
		sim.T[i] = r.F64()
	}
	return sim
}

func saveTime(w *binstate.Writer, t time.Time) {
	w.Bool(t.IsZero())
	if !t.IsZero() {
		w.I64(t.UnixNano())
	}
}

func loadTime(r *binstate.Reader) time.Time {
	if r.Bool("zero time") {
		return time.Time{}
	}
	return time.Unix(0, r.I64())
}

func saveInputs(w *binstate.Writer, ins []input) {
	w.Int(len(ins))
	for _, in := range ins {
		w.I64(int64(in.seq))
		saveTime(w, in.stamp)
		w.F32s(in.pix)
	}
}

func loadInputs(r *binstate.Reader, px, maxN int) []input {
	n := r.Int("buffered inputs", 0, maxN)
	var out []input
	for i := 0; i < n && r.Err() == nil; i++ {
		in := input{seq: uint64(r.I64()), stamp: loadTime(r)}
		in.pix = r.F32s("input pixels", px)
		if r.Err() == nil && len(in.pix) != px {
			r.Fail(fmt.Errorf("%w: an input holds %d pixel values, the stream's resolution needs %d", binstate.ErrCorrupt, len(in.pix), px))
		}
		if r.Err() == nil {
			in.rgb = startRGB(in.pix)
			out = append(out, in)
		}
	}
	return out
}

func saveResults(w *binstate.Writer, res []Result) {
	w.Int(len(res))
	for _, x := range res {
		w.I64(int64(x.Seq))
		saveTime(w, x.Stamp)
		w.Int(int(x.Kind))
		for _, row := range x.CamToWorld {
			for _, v := range row {
				w.F64(v)
			}
		}
		w.F32Raw(x.PoseEnc[:])
		for _, v := range x.Intrinsics {
			w.F64(v)
		}
		w.Int(x.Width)
		w.Int(x.Height)
		w.F32s(x.Depth)
		w.F32s(x.Conf)
		w.F32s(x.Points)
		w.F32s(x.PointsConf)
		w.Bytes(x.RGB)
		w.F64(x.Flow)
		w.Int(x.Window)
	}
}

func loadResults(r *binstate.Reader, h, w int) []Result {
	n := r.Int("held results", 0, maxListFrames)
	var out []Result
	for i := 0; i < n && r.Err() == nil; i++ {
		x := Result{Seq: uint64(r.I64()), Stamp: loadTime(r)}
		x.Kind = FrameKind(r.Int("frame kind", 0, int(NonKeyframe)))
		for a := range x.CamToWorld {
			for b := range x.CamToWorld[a] {
				x.CamToWorld[a][b] = r.F64()
			}
		}
		r.F32Raw(x.PoseEnc[:])
		for a := range x.Intrinsics {
			x.Intrinsics[a] = r.F64()
		}
		x.Width = r.Int("result width", 0, w)
		x.Height = r.Int("result height", 0, h)
		x.Depth = r.F32s("depth", h*w)
		x.Conf = r.F32s("confidence", h*w)
		x.Points = r.F32s("points", 3*h*w)
		x.PointsConf = r.F32s("point confidence", h*w)
		x.RGB = r.Bytes("colours", 3*h*w)
		x.Flow = r.F64()
		x.Window = r.Int("result window", 0, 1<<40)
		out = append(out, x)
	}
	return out
}
