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
	"runtime"
	"sync"

	"github.com/lingbotmap/lingbotmap/engine/binstate"
	"github.com/lingbotmap/lingbotmap/engine/model"
	"github.com/lingbotmap/lingbotmap/engine/weights"
)

// A session state file holds a Stream's whole state, so that a later
// process continues the stream as if it had never stopped:
//
//	magic      8 bytes "LBMSTATE"
//	version    uint32 (StateVersion)
//	header     uint32 length, then JSON: the Fingerprint, then a uint32
//	           CRC-32C of the magic, version, length and JSON, checked
//	           before the fingerprint is trusted
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
// Version 4 added the header's checksum; older files are refused, since
// their header cannot be proven.
const StateVersion = 4

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
	// and the SHA-256 of every byte of every tensor, or over the table and
	// the seed of a random model.
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

// weightsFingerprint hashes a store's table and every byte of its tensors:
// one SHA-256 per tensor, computed on all cores in one pass over the
// (mapped) bytes, then one over the table and those digests, so that a
// session is resumed only with the very weights it was saved with.
func weightsFingerprint(cfg Config, s weights.Store) (string, error) {
	keys := s.Keys()
	raw, _ := s.(weights.RawReader)
	digests := make([][sha256.Size]byte, len(keys))
	if raw != nil && cfg.Weights != "" {
		errs := make([]error, len(keys))
		next := make(chan int)
		var wg sync.WaitGroup
		for range min(runtime.GOMAXPROCS(0), len(keys)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					b, err := raw.RawBytes(keys[i])
					if err != nil {
						errs[i] = fmt.Errorf("engine: fingerprinting %s: %w", keys[i], err)
						continue
					}
					digests[i] = sha256.Sum256(b)
				}
			}()
		}
		for i := range keys {
			next <- i
		}
		close(next)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return "", err
		}
	}
	h := sha256.New()
	if cfg.Weights == "" {
		fmt.Fprintf(h, "random %s seed %d\n", cfg.ModelSize, cfg.Seed)
	}
	for i, k := range keys {
		inf, _ := s.Info(k)
		fmt.Fprintf(h, "%s %s %v\n", k, inf.DType, inf.Shape)
		if raw != nil && cfg.Weights != "" {
			h.Write(digests[i][:])
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func (s *stream) fingerprint() (Fingerprint, error) {
	id, err := s.weightsFingerprint()
	if err != nil {
		return Fingerprint{}, err
	}
	return Fingerprint{
		Backend:   s.be.Name(),
		Precision: s.cfg.ComputePrecision(),
		Sizes:     s.m.Sizes(),
		Weights:   id,
		Settings:  resultSettings(s.cfg),
		// the model's resolution, which phase 1 may fix before the stream's
		InputWidth: s.m.Width(), InputHeight: s.m.Height(),
	}, nil
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
	if seq, ok := s.heldSeq(); ok {
		return fmt.Errorf("engine: SaveState while frame %d is held ahead (overlap_frames): Drain it first", seq)
	}
	fp, err := s.fingerprint()
	if err != nil {
		return err
	}
	hdr, err := json.Marshal(fp)
	if err != nil {
		return fmt.Errorf("engine: state header: %w", err)
	}
	var pre bytes.Buffer
	pre.Write(stateMagic[:])
	binary.Write(&pre, binary.LittleEndian, uint32(StateVersion))
	binary.Write(&pre, binary.LittleEndian, uint32(len(hdr)))
	pre.Write(hdr)
	binary.Write(&pre, binary.LittleEndian, crc32.Checksum(pre.Bytes(), crc32.MakeTable(crc32.Castagnoli)))
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
	switch v := binary.LittleEndian.Uint32(pre[8:12]); {
	case v < StateVersion:
		return Fingerprint{}, fmt.Errorf("%w: %w (state format version %d, this build reads version %d); start a new run", ErrStateMismatch, binstate.ErrUnproven, v, StateVersion)
	case v != StateVersion:
		return Fingerprint{}, fmt.Errorf("%w: state format version %d, this build reads version %d", ErrStateMismatch, v, StateVersion)
	}
	n := binary.LittleEndian.Uint32(pre[12:16])
	if n > maxHeader {
		return Fingerprint{}, fmt.Errorf("engine: %w: state header of %d bytes is over the %d-byte limit", binstate.ErrCorrupt, n, maxHeader)
	}
	hdr := make([]byte, n+4)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return Fingerprint{}, fmt.Errorf("engine: %w: state header truncated: %w", binstate.ErrCorrupt, err)
	}
	table := crc32.MakeTable(crc32.Castagnoli)
	if got, want := binary.LittleEndian.Uint32(hdr[n:]), crc32.Update(crc32.Checksum(pre[:], table), table, hdr[:n]); got != want {
		return Fingerprint{}, fmt.Errorf("engine: %w: state header checksum %08x, its content gives %08x", binstate.ErrCorrupt, got, want)
	}
	hdr = hdr[:n]
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
	fp, err := s.fingerprint()
	if err == nil {
		err = fp.mismatch(saved)
	}
	if err != nil {
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
