package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lingbotmap/lingbotmap/config"
	"github.com/lingbotmap/lingbotmap/node"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/binstate"
	"github.com/lingbotmap/lingbotmap/engine/mapframe"
	"github.com/lingbotmap/lingbotmap/engine/output"
	"github.com/lingbotmap/lingbotmap/engine/source"
)

// Resumable runs. With --checkpoint-every N, run saves its whole session
// every N input frames into OUT/session/run.state, atomically: its
// settings and input position, what the output writer has counted, the
// trajectory and map so far (mapio.Map state) and the engine's state
// (engine.Snapshotter). `run --resume OUT` continues from the last one with
// the saved settings; the trajectory it ends with equals the one an
// uninterrupted run gives.
//
// run.state is an output.Session: magic "LBMRUN\x00\x02", the JSON
// sessionMeta, the output folder's state (the depth ranges and the map),
// then the engine's state.

const sessionFileName = "run.state"

// runSession is run.state's frame around meta.
func runSession(meta *sessionMeta) output.Session {
	return output.Session{Magic: [8]byte{'L', 'B', 'M', 'R', 'U', 'N', 0, 3}, Header: meta, MaxHeader: 1 << 20,
		// before the header checksum (1) and the outputs' checksums (2)
		Older: [][8]byte{{'L', 'B', 'M', 'R', 'U', 'N', 0, 1}, {'L', 'B', 'M', 'R', 'U', 'N', 0, 2}}}
}

// sessionOptions are run's flags for sessions and what a resume restored.
type sessionOptions struct {
	every  int    // --checkpoint-every: save the session every N frames read (0 = never)
	resume string // --resume: the output folder of the run to continue
	// resumeStream starts the engine from a saved state (tests replace it).
	resumeStream func(ctx context.Context, cfg engine.Config, state io.Reader, log *slog.Logger) (engine.Stream, error)

	// given are the settings given beside --resume, to be checked against
	// the session's.
	given *givenSettings

	saved     *sessionMeta // the session being resumed
	rest      []byte       // its map and engine state, read with it
	lastSaved int          // frames read at the last save
}

func defaultSessionOptions() sessionOptions {
	return sessionOptions{resumeStream: resumeEngineStream}
}

func resumeEngineStream(ctx context.Context, cfg engine.Config, state io.Reader, log *slog.Logger) (engine.Stream, error) {
	return engine.Resume(ctx, cfg, backendFactory(log), state, log)
}

// sessionMeta is the JSON part of run.state.
type sessionMeta struct {
	Input      string         `json:"input"`
	Source     source.Options `json:"source"`
	Engine     engine.Config  `json:"engine"`
	Run        sessionRun     `json:"run"`
	FramesRead int            `json:"frames_read"`
	Frames     output.Frames  `json:"frames"`
	Depth      output.Depth   `json:"depth"`
	Window     int            `json:"window"`
	// MapFrame is the map frame and metric scale the files are written in
	// (zero in sessions of versions before it)
	MapFrame mapframe.State `json:"map_frame"`
}

// sessionRun are run's own settings that shape its outputs.
type sessionRun struct {
	ConfThreshold float64 `json:"conf_threshold"`
	Voxel         float64 `json:"map_voxel"`
	PixelStride   int     `json:"cloud_stride"`
	SaveDepth     bool    `json:"save_depth"`
	SaveConf      bool    `json:"save_conf"`
	DepthScale    float64 `json:"depth_scale"`
	ConfScale     float64 `json:"conf_scale"`
	Every         int     `json:"checkpoint_every"`
}

// loadSession reads OUT/session/run.state of --resume OUT and puts its
// settings into o: the input, the source options, the engine settings and
// run's output settings all come from the session; an INPUT given on the
// command line must be the saved one.
func (s *sessionOptions) load(o *runOptions, log *slog.Logger) error {
	path := filepath.Join(s.resume, output.SessionDir, sessionFileName)
	data, err := os.ReadFile(path)
	if err != nil {
		return &exitCodeError{code: exitUsage, err: fmt.Errorf("--resume: no saved session (a run with --session saves one at every checkpoint, each --checkpoint-every N frames and at the end): %w", err)}
	}
	meta, rest, err := parseSessionHeader(data)
	if err != nil {
		return &exitCodeError{code: exitBadInput, err: fmt.Errorf("--resume %s: %w", path, err)}
	}
	if o.input != "" && o.input != meta.Input {
		return &exitCodeError{code: exitUsage, err: fmt.Errorf("--resume: the session in %s maps %s, not %s", s.resume, meta.Input, o.input)}
	}
	if err := s.given.check(meta, s.resume, log); err != nil {
		return &exitCodeError{code: exitUsage, err: err}
	}
	o.input, o.src, o.cfg, o.out = meta.Input, meta.Source, meta.Engine, s.resume
	r := meta.Run
	o.confThreshold, o.voxel, o.pixelStride = r.ConfThreshold, r.Voxel, r.PixelStride
	o.saveDepth, o.saveConf, o.depthScale, o.confScale = r.SaveDepth, r.SaveConf, r.DepthScale, r.ConfScale
	// the cadence of the checkpoints is the one setting a resume may
	// change: it shapes no output
	if s.given == nil || !s.given.sources.Given("checkpoint_every") {
		o.checkpointEvery = r.Every
	}
	s.saved, s.rest, s.lastSaved = meta, rest, meta.FramesRead
	return nil
}

func parseSessionHeader(data []byte) (*sessionMeta, []byte, error) {
	meta := &sessionMeta{}
	r := bytes.NewReader(data)
	if err := runSession(meta).ReadHeader(r); err != nil {
		return nil, nil, err
	}
	if meta.FramesRead < 0 || meta.Frames.Results < 0 {
		return nil, nil, fmt.Errorf("%w: session header counts %d frames read", binstate.ErrCorrupt, meta.FramesRead)
	}
	return meta, data[len(data)-r.Len():], nil
}

// startStream starts the engine: afresh, or from the resumed session's
// state after restoring the writer's (the ranges and the map).
func (s *sessionOptions) startStream(ctx context.Context, o *runOptions, w *output.Folder, log *slog.Logger) (engine.Stream, error) {
	if s.saved == nil {
		return o.newStream(ctx, o.cfg, log)
	}
	r := bytes.NewReader(s.rest)
	counts := output.State{Frames: s.saved.Frames, Depth: s.saved.Depth, Window: s.saved.Window, MapFrame: s.saved.MapFrame}
	if err := output.ReadBody(r, func(br *binstate.Reader) error { return w.LoadState(br, counts) }); err != nil {
		return nil, &exitCodeError{code: exitBadInput, err: fmt.Errorf("--resume: the session's map: %w", err)}
	}
	// Every image the session wrote must be in the folder as written.
	if err := w.CheckFiles(); err != nil {
		return nil, &exitCodeError{code: exitBadInput, err: fmt.Errorf("--resume: %w", err)}
	}
	// The trajectory file may hold rows past the session; Create rewrites
	// it from the restored map, then it grows again from there.
	if err := w.Restore(w.Map(), w.Frames()); err != nil {
		return nil, fmt.Errorf("--resume: %w", err)
	}
	st, err := s.resumeStream(ctx, o.cfg, r, log)
	if err != nil {
		var ec *exitCodeError
		if errors.Is(err, engine.ErrStateMismatch) || errors.Is(err, binstate.ErrCorrupt) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = &exitCodeError{code: exitBadInput, err: err}
		} else if errors.As(err, &ec) {
			return nil, err
		}
		return nil, fmt.Errorf("--resume: %w", err)
	}
	s.rest = nil
	log.Info("resumed", "session", filepath.Join(o.out, output.SessionDir, sessionFileName), "frames_read", s.saved.FramesRead, "results", s.saved.Frames.Results)
	return st, nil
}

// skipInput passes over the frames the resumed session has already read.
func (s *sessionOptions) skipInput(ctx context.Context, src source.Source) (int, error) {
	if s.saved == nil {
		return 0, nil
	}
	for i := 0; i < s.saved.FramesRead; i++ {
		if _, err := src.Next(ctx); err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("the input has only %d frames, the session had read %d", i, s.saved.FramesRead)
			}
			return i, fmt.Errorf("--resume: skipping the frames already mapped: %w", err)
		}
	}
	return s.saved.FramesRead, nil
}

// afterFrame saves the session when --checkpoint-every frames have been read
// since the last save.
func (s *sessionOptions) afterFrame(o *runOptions, stream engine.Stream, w *output.Folder, read int) error {
	if s.every <= 0 || read-s.lastSaved < s.every {
		return nil
	}
	if err := saveSession(o, stream, w, read); err != nil {
		return fmt.Errorf("saving the session: %w", err)
	}
	s.lastSaved = read
	return nil
}

// saveSession writes OUT/session/run.state atomically.
func saveSession(o *runOptions, stream engine.Stream, w *output.Folder, read int) error {
	snap, ok := stream.(engine.Snapshotter)
	if !ok {
		return errors.New("this engine cannot save its state")
	}
	st := w.State()
	meta := &sessionMeta{
		Input: o.input, Source: o.src, Engine: o.cfg, FramesRead: read,
		Frames: st.Frames, Depth: st.Depth, Window: st.Window, MapFrame: st.MapFrame,
		Run: sessionRun{ConfThreshold: o.confThreshold, Voxel: o.voxel, PixelStride: o.pixelStride,
			SaveDepth: o.saveDepth, SaveConf: o.saveConf, DepthScale: o.depthScale, ConfScale: o.confScale,
			Every: o.session.every},
	}
	return runSession(meta).Write(filepath.Join(o.out, output.SessionDir, sessionFileName), w.SaveState, snap)
}

// givenSettings are the settings and input flags given beside --resume.
type givenSettings struct {
	values  map[string]any // every setting as loaded
	sources config.Sources
	src     source.Options
	flags   []string // the input flags given
	out     string   // --out, if given
}

// givenBesideResume takes what the command line (and the --config file
// and environment) gave beside --resume.
func givenBesideResume(cmd *cobra.Command, all node.Config, o *runOptions) *givenSettings {
	g := &givenSettings{values: config.Values(&all), sources: o.sources, src: o.src}
	for _, name := range sourceFlags {
		if cmd.Flags().Changed(name) {
			g.flags = append(g.flags, name)
		}
	}
	if cmd.Flags().Changed("out") {
		g.out = o.out
	}
	return g
}

// sourceFlags are run's flags that choose the input's frames, with their
// values in source.Options.
var sourceFlags = []string{"topic", "rotate-cw90", "first-k", "stride", "fps", "frame-rate"}

func sourceFlagValue(o source.Options, flag string) any {
	switch flag {
	case "topic":
		return o.Topic
	case "rotate-cw90":
		return o.RotateCW90
	case "first-k":
		return o.FirstK
	case "stride":
		return o.Stride
	case "fps":
		return o.SampleFPS
	case "frame-rate":
		return o.FrameRate
	}
	return nil
}

// savedSettings are the session's settings under the schema's keys.
func savedSettings(meta *sessionMeta) map[string]any {
	all := runDefaults()
	all.Engine = meta.Engine
	r := meta.Run
	all.ConfThreshold, all.MapVoxel, all.CloudStride = r.ConfThreshold, r.Voxel, r.PixelStride
	all.Output.SaveDepth, all.Output.SaveConf, all.Output.DepthScale, all.Output.ConfScale = r.SaveDepth, r.SaveConf, r.DepthScale, r.ConfScale
	all.Output.CheckpointEvery = r.Every
	return config.Values(&all)
}

// check compares what was given beside --resume with the session: a
// resume continues the session with the session's settings, so a flag
// that asks for another value is refused rather than ignored (all of them
// named); a --config file or an environment variable that differs is
// reported, and the session's value used. checkpoint_every is taken.
func (g *givenSettings) check(meta *sessionMeta, dir string, log *slog.Logger) error {
	if g == nil {
		return nil
	}
	saved := savedSettings(meta)
	var refused []string
	for key, from := range g.sources.From {
		sv, ok := saved[key]
		if !ok || key == "checkpoint_every" || fmt.Sprint(sv) == fmt.Sprint(g.values[key]) {
			continue
		}
		if from == "flag" {
			refused = append(refused, fmt.Sprintf("--%s %v (the session's: %v)", config.FlagName(key), g.values[key], sv))
		} else {
			log.Warn("--resume uses the session's setting, not the one given", "key", key, "given", g.values[key], "from", from, "session", sv)
		}
	}
	for _, flag := range g.flags {
		if gv, sv := sourceFlagValue(g.src, flag), sourceFlagValue(meta.Source, flag); fmt.Sprint(gv) != fmt.Sprint(sv) {
			refused = append(refused, fmt.Sprintf("--%s %v (the session's: %v)", flag, gv, sv))
		}
	}
	if g.out != "" && filepath.Clean(g.out) != filepath.Clean(dir) {
		refused = append(refused, fmt.Sprintf("--out %s (a resumed run writes into its own folder %s)", g.out, dir))
	}
	if len(refused) == 0 {
		return nil
	}
	slices.Sort(refused)
	return fmt.Errorf("--resume continues the session in %s with its own settings; these given beside it differ: %s. Drop them to resume, or start a new run with them", dir, strings.Join(refused, ", "))
}

// resumeHint says how an interrupted run goes on: --resume where it saved
// its session, else how to make the next run resumable.
func resumeHint(o *runOptions) string {
	switch _, err := os.Stat(filepath.Join(o.out, output.SessionDir, sessionFileName)); {
	case err == nil && (o.saveSessions || o.session.resume != ""):
		return fmt.Sprintf("continue it with: lingbotmap run --resume %s", o.out)
	case o.saveSessions:
		return "it stopped before its first session save, so it cannot be resumed: run it again (with --force)"
	}
	return "this run saved no session, so it cannot be resumed (a run with --session can be continued with --resume OUT)"
}
