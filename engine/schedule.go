package engine

// The schedule decides what the model runs, frame by frame, from the
// frames' order alone: which window a frame goes into, when phase 1 runs on
// the scale frames, which streaming frames are keyframes by the interval
// rule (flow keyframes: the rule, once the flow is measured), when a window
// ends, which frames the next window starts on, and when live windows warm
// the next window up. It runs nothing and never sees a model output but the
// two it is told (the last scale frame's pose and a measured flow), so it is
// tested without a backend (schedule_test.go). The stream (stream.go) is
// its executor: it runs each step on the backend, aligns and stitches the
// windows' results and tells the schedule what ran.

// window is the schedule of one cache lifetime: from a reset to the next.
type window struct {
	index  int
	scaleN int     // scale frames of this window
	buf    []input // phase-1 buffer
	n      int     // frames processed
	kfs    int     // keyframes committed after phase 1
	lastKF [9]float32
	lastKn int // local index of the last keyframe

	// windowed mode
	tail  []input // reference mode: the last Overlap inputs, re-run by the next window
	rerun int     // leading frames that re-run the previous window's frames
	gap   int     // live windows: overlap frames after the re-runs that this window did not run
}

// schedule is the stream's schedule (see above).
type schedule struct {
	cfg      Config
	win      *window
	recent   []input // live: the last Overlap inputs pushed, whichever window ran them
	flowDecs int     // flow keyframe decisions so far, for Config.Decide
	// serialWindows switches the live windows' early start off (tests).
	serialWindows bool
}

// op is what a step runs.
type op uint8

const (
	// opBuffer runs nothing: a scale frame waits for the rest.
	opBuffer op = iota
	// opPhase1 runs the window's scale frames together.
	opPhase1
	// opFrame runs one streaming frame of the kind the interval rule gives.
	opFrame
	// opFlow runs one streaming frame with eviction deferred; the flow it
	// measures decides its kind (schedule.decide).
	opFlow
)

// step is one model call of a window: its phase 1, or one streaming frame.
type step struct {
	w     *window
	op    op
	ins   []input
	kind  FrameKind // Scale for phase 1; an interval frame's kind
	local int       // a flow frame's index in its window
}

// change is a window change, decided before the frame that opens the new
// window.
type change struct {
	index    int     // the new window's
	retained []input // the old window's last frames the new window starts on
	rerun    int     // how many of them it re-runs: its first frames
	gap      int     // live: the rest, emitted already, which it skips
	dropped  int     // flow windows: overlap frames inside the old window's scale frames, which the reference drops
}

// warmStep is what a live window's warm-up of the next window does after a
// frame.
type warmStep struct {
	start *window // a warm-up begins: the next window
	take  []input // scale frames of the next window that arrived
	left  int     // frames left in the current window, this one included
}

func newSchedule(cfg Config) schedule {
	return schedule{cfg: cfg, win: &window{}}
}

// reset starts over at window 0 (a new map).
func (p *schedule) reset() {
	p.win = &window{}
	p.recent = nil
}

// live says whether windows are joined live (Config.WindowMode).
func (p *schedule) live() bool { return p.cfg.Windowed && p.cfg.WindowMode == WindowLive }

// overlap is the number of frames consecutive windows share.
func (p *schedule) overlap() int { return p.cfg.OverlapSize }

// early says whether live windows start the next window early.
func (p *schedule) early() bool { return p.cfg.canStartEarly() && !p.serialWindows && !p.cfg.Localize }

// canStartEarly says whether the settings let live windows start early: it
// needs fixed-interval windows (a flow window's end is known only when it
// comes) whose overlap holds the next window's scale frames and at least one
// frame after them, over which its phase 1 spreads.
func (c Config) canStartEarly() bool {
	return c.Windowed && c.WindowMode == WindowLive && c.FlowThreshold == 0 && c.OverlapSize >= c.ScaleFrames+1
}

// windowFrames is a fixed-interval window's length in frames (positions).
// A live window after the first re-runs its scale frames and skips the rest
// of the overlap (its gap), so its cache holds gap frames fewer than its
// length; live window 0 has no gap and ends that many frames early, so that
// its cache never holds more frames than a later window's and its last
// frames cost the model no more than theirs. It keeps at least its scale
// frames before the overlap, so that the next window's scale frames follow
// its phase 1.
func (p *schedule) windowFrames(w *window) int {
	ws := p.cfg.ScaleFrames
	n := ws + max(p.cfg.WindowSize-ws, 0)*max(p.cfg.KeyframeInterval, 1)
	if w.index == 0 && p.live() && p.cfg.FlowThreshold == 0 {
		if short := n - max(p.overlap()-ws, 0); short-p.overlap() >= ws {
			return short
		}
	}
	return n
}

// windowDone says whether the current window has taken all its frames, so
// that the next frame opens a new one (windowed mode).
func (p *schedule) windowDone() bool {
	w := p.win
	if !p.cfg.Windowed || len(w.buf) > 0 || w.n == 0 || p.cfg.Localize {
		return false
	}
	if p.cfg.FlowThreshold > 0 {
		return w.n > w.scaleN && w.kfs >= p.cfg.WindowSize-w.scaleN
	}
	return w.n+w.gap >= p.windowFrames(w)
}

// windowChange is the change windowDone calls for. Reference windows start
// overlap frames back and re-run them all; live windows re-run only the
// scale frames, the first of the overlap, and skip the rest (their gap).
// Flow windows never start inside the old window's scale frames.
func (p *schedule) windowChange() change {
	old := p.win
	c := change{index: old.index + 1}
	if p.live() {
		c.retained = p.recent
		if maxBack := old.n + old.gap - old.scaleN; p.cfg.FlowThreshold > 0 && len(c.retained) > maxBack {
			c.dropped = len(c.retained) - maxBack
			c.retained = c.retained[c.dropped:]
		}
		c.rerun = min(p.cfg.ScaleFrames, len(c.retained))
		c.gap = len(c.retained) - c.rerun
		return c
	}
	c.retained = old.tail
	if maxBack := old.n - old.scaleN; p.cfg.FlowThreshold > 0 && len(c.retained) > maxBack {
		c.dropped = len(c.retained) - maxBack
		c.retained = c.retained[c.dropped:]
	}
	c.rerun = len(c.retained)
	return c
}

// startWindow opens the window of c; the frames it re-runs come next.
func (p *schedule) startWindow(c change) {
	p.win = &window{index: c.index, rerun: c.rerun, gap: c.gap}
}

// takeOver makes a warmed-up window the current one.
func (p *schedule) takeOver(w *window) { p.win = w }

// saw notes a frame pushed (live windows keep the last Overlap, which the
// next window starts on).
func (p *schedule) saw(in input) {
	if p.live() {
		p.recent = keepLast(append(p.recent, in), p.overlap())
	}
}

// take puts a frame into the current window: into the phase-1 buffer until
// the scale frames are all in, then phase 1 on them, then one streaming
// frame at a time.
func (p *schedule) take(in input) step {
	w := p.win
	if w.n == 0 {
		w.buf = append(w.buf, in)
		if len(w.buf) < p.cfg.ScaleFrames {
			return step{w: w, op: opBuffer}
		}
		return p.phase1(w, w.buf)
	}
	if p.cfg.Localize {
		// localized against the cached keyframes; the cache never grows
		return step{w: w, op: opFrame, ins: []input{in}, kind: NonKeyframe}
	}
	if p.cfg.FlowThreshold > 0 {
		return step{w: w, op: opFlow, ins: []input{in}, local: w.n}
	}
	kind := NonKeyframe
	// relative to the window's first streaming frame, which is a keyframe
	if p.cfg.KeyframeInterval <= 1 || (w.n-w.scaleN)%p.cfg.KeyframeInterval == 0 {
		kind = Keyframe
	}
	return step{w: w, op: opFrame, ins: []input{in}, kind: kind}
}

// phase1 is w's phase 1 on ins.
func (p *schedule) phase1(w *window, ins []input) step {
	return step{w: w, op: opPhase1, ins: ins, kind: Scale}
}

// flushStep is the partial phase 1 at the end of input, if frames wait.
func (p *schedule) flushStep() (step, bool) {
	if len(p.win.buf) == 0 {
		return step{}, false
	}
	return p.phase1(p.win, p.win.buf), true
}

// done advances st's window past st, which ran; last is the pose of its
// last frame, phase 1's last scale frame being the first keyframe
// reference of flow keyframes.
func (p *schedule) done(st step, last [9]float32) {
	w := st.w
	for _, in := range st.ins {
		p.remember(w, in)
	}
	if st.op != opPhase1 {
		w.n++
		return
	}
	w.scaleN, w.n = len(st.ins), len(st.ins)
	w.lastKF, w.lastKn = last, len(st.ins)-1
	w.buf = nil
}

// decide is the flow keyframe rule for flow frame st, whose pose and mean
// flow to the last keyframe were measured (reference §12): a keyframe is
// the window's first streaming frame, or one that moved more than the
// threshold, or one the maximum gap forces; Config.Decide sees and may
// override every decision. A keyframe becomes the next flow reference.
func (p *schedule) decide(st step, flow float64, pose [9]float32) bool {
	w := st.w
	kf := w.kfs == 0 || flow > p.cfg.FlowThreshold || st.local-w.lastKn >= p.cfg.MaxNonKeyframeGap
	if p.cfg.Decide != nil {
		kf = p.cfg.Decide(p.flowDecs, flow, kf)
	}
	p.flowDecs++
	if kf {
		w.lastKF, w.lastKn = pose, st.local
		w.kfs++
	}
	return kf
}

// remember keeps the inputs a next window re-runs (reference mode; live
// windows keep the stream's last inputs, saw).
func (p *schedule) remember(w *window, in input) {
	if !p.cfg.Windowed || p.live() {
		return
	}
	w.tail = keepLast(append(w.tail, in), p.overlap())
}

// warm says what a live window's early start does after the current window
// took in (the newest of recent), given whether a warm-up is under way:
// once the frames the next window re-runs have begun, a warm-up starts with
// those that arrived, or takes in if it is one of them, and advances by its
// share of the work left over the frames left. ok is false before then.
func (p *schedule) warm(in input, warming bool) (ws warmStep, ok bool) {
	w := p.win
	wf, sf := p.windowFrames(w), p.cfg.ScaleFrames
	pos := w.n + w.gap - 1          // in's position in this window
	start := max(wf-p.overlap(), 0) // the next window's first scale frame's
	if w.n == 0 || pos < start {
		return warmStep{}, false
	}
	if !warming {
		ws.start = &window{index: w.index + 1, rerun: sf, gap: p.overlap() - sf}
		// the scale frames so far: in, and earlier ones when the warm-up
		// starts late (a resumed stream, or a window that took over after
		// they came)
		for i, r := range p.recent {
			if q := pos - (len(p.recent) - 1 - i); q >= start && q < start+sf {
				ws.take = append(ws.take, r)
			}
		}
	} else if pos < start+sf {
		ws.take = []input{in}
	}
	ws.left = wf - pos
	return ws, true
}

// keepLast trims xs to its last n elements in place.
func keepLast[T any](xs []T, n int) []T {
	if len(xs) > n {
		xs = append(xs[:0], xs[len(xs)-n:]...)
	}
	return xs
}
