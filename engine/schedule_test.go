package engine

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// driver runs a schedule as the stream does, with no model: it takes each
// step the schedule makes and tells it the step ran, with pose[0] the frame's
// sequence number and flows[seq] a flow frame's measured flow. The warm-up
// of live windows runs its phase 1 as soon as its scale frames are in.
type driver struct {
	p     schedule
	flows map[uint64]float64
	nx    *window // a live window warming up
	p1    []input // its scale frames so far
	// calls are the model calls the plan makes, as the stream's trace
	// names them (Config.Trace)
	calls []string
	bg    bool // the calls are the warm-up's
}

func seqsOf(ins []input) []uint64 {
	var s []uint64
	for _, in := range ins {
		s = append(s, in.seq)
	}
	return s
}

// push is one Push; it returns what the schedule planned, in order.
func (d *driver) push(seq uint64) string {
	var ev []string
	in := input{seq: seq}
	if d.p.windowDone() {
		c := d.p.windowChange()
		e := fmt.Sprintf("w%d rerun %v gap %d", c.index, seqsOf(c.retained[:c.rerun]), c.gap)
		if c.dropped > 0 {
			e += fmt.Sprintf(" drop %d", c.dropped)
		}
		if d.nx != nil {
			// the warm-up ran the re-runs already
			if d.nx.n != c.rerun || d.nx.index != c.index || d.nx.gap != c.gap {
				panic(fmt.Sprintf("warmed window %+v is not the change %+v", *d.nx, c))
			}
			d.p.takeOver(d.nx)
			d.nx, d.p1 = nil, nil
			d.calls = append(d.calls, "reset")
			ev = append(ev, e+" warmed")
		} else {
			d.p.startWindow(c)
			d.calls = append(d.calls, "reset")
			ev = append(ev, e)
			for _, r := range c.retained[:c.rerun] {
				ev = append(ev, d.run(d.p.take(r))...)
			}
		}
	}
	d.p.saw(in)
	ev = append(ev, d.run(d.p.take(in))...)
	if d.p.early() {
		if ws, ok := d.p.warm(in, d.nx != nil); ok {
			if ws.start != nil {
				d.nx = ws.start
				ev = append(ev, fmt.Sprintf("warm w%d", d.nx.index))
			}
			if len(ws.take) > 0 {
				d.p1 = append(d.p1, ws.take...)
				ev = append(ev, fmt.Sprintf("+%v", seqsOf(ws.take)))
			}
			if d.nx.n == 0 && len(d.p1) == d.nx.rerun {
				d.bg = true
				d.run(d.p.phase1(d.nx, d.p1))
				d.bg = false
				ev = append(ev, fmt.Sprintf("bg p1 %v", seqsOf(d.p1)))
			}
			ev = append(ev, fmt.Sprintf("left %d", ws.left))
		}
	}
	return strings.Join(ev, ", ")
}

// run "runs" a step and names it: buffered frames by nothing.
func (d *driver) run(st step) []string {
	switch st.op {
	case opBuffer:
		return nil
	case opPhase1:
		d.call(fmt.Sprintf("call %d", len(st.ins)))
		last := st.ins[len(st.ins)-1].seq
		d.p.done(st, [9]float32{float32(last)})
		return []string{fmt.Sprintf("p1 %v", seqsOf(st.ins))}
	case opFlow:
		seq := st.ins[0].seq
		kind := NonKeyframe
		d.call("call 1")
		if d.p.decide(st, d.flows[seq], [9]float32{float32(seq)}) {
			kind = Keyframe
			d.call("commit")
		} else {
			d.call("rollback")
		}
		d.p.done(st, [9]float32{float32(seq)})
		return []string{fmt.Sprintf("%s %d", short(kind), seq)}
	}
	if st.kind == NonKeyframe {
		d.call("call 1 skip")
	} else {
		d.call("call 1")
	}
	d.p.done(st, [9]float32{float32(st.ins[0].seq)})
	return []string{fmt.Sprintf("%s %d", short(st.kind), st.ins[0].seq)}
}

func (d *driver) call(c string) {
	if d.bg {
		c = "bg " + c
	}
	d.calls = append(d.calls, c)
}

func short(k FrameKind) string {
	if k == NonKeyframe {
		return "nk"
	}
	return "kf"
}

// flush is Flush's plan.
func (d *driver) flush() string {
	if st, ok := d.p.flushStep(); ok {
		return strings.Join(d.run(st), ", ")
	}
	return ""
}

func schedConfig(mut func(*Config)) Config {
	cfg := DefaultConfig()
	cfg.ScaleFrames = 2
	cfg.WindowSize = 4
	cfg.OverlapSize = 2
	cfg.MaxNonKeyframeGap = 3
	mut(&cfg)
	return cfg
}

// TestSchedulePlans: each mode's plan, push by push, as the reference
// defines it (reference-model.md §6, §12, §13) and the live windows change
// (schedule.go): phase 1 on the scale frames, the keyframe rules relative to
// each window's first streaming frame, window ends, the frames the next
// window re-runs and those it drops, and the live warm-up.
func TestSchedulePlans(t *testing.T) {
	cases := []struct {
		name  string
		cfg   Config
		flows map[uint64]float64
		n     int
		want  []string // per push, then the flush
	}{
		{
			name: "streaming, keyframe interval 2",
			cfg:  schedConfig(func(c *Config) { c.KeyframeInterval = 2 }),
			n:    8,
			want: []string{"", "p1 [0 1]", "kf 2", "nk 3", "kf 4", "nk 5", "kf 6", "nk 7", ""},
		},
		{
			name: "streaming, phase 1 cut short by the end of input",
			cfg:  schedConfig(func(c *Config) { c.ScaleFrames = 4 }),
			n:    3,
			want: []string{"", "", "", "p1 [0 1 2]"},
		},
		{
			// windows [0,4), [2,6), [4,8): step 4−2
			name: "reference windows",
			cfg:  schedConfig(func(c *Config) { c.Windowed = true }),
			n:    8,
			want: []string{"", "p1 [0 1]", "kf 2", "kf 3",
				"w1 rerun [2 3] gap 0, p1 [2 3], kf 4", "kf 5",
				"w2 rerun [4 5] gap 0, p1 [4 5], kf 6", "kf 7", ""},
		},
		{
			// a window is 2 + (4−2)·2 = 6 frames; the rule restarts in each
			name: "reference windows, keyframe interval 2",
			cfg: schedConfig(func(c *Config) {
				c.Windowed, c.KeyframeInterval = true, 2
			}),
			n: 11,
			want: []string{"", "p1 [0 1]", "kf 2", "nk 3", "kf 4", "nk 5",
				"w1 rerun [4 5] gap 0, p1 [4 5], kf 6", "nk 7", "kf 8", "nk 9",
				"w2 rerun [8 9] gap 0, p1 [8 9], kf 10", ""},
		},
		{
			// the window ends at its second keyframe after phase 1: frame 5
			// by the gap rule (5−2 ≥ 3)
			name:  "flow windows",
			cfg:   schedConfig(func(c *Config) { c.Windowed, c.FlowThreshold = true, 1 }),
			flows: map[uint64]float64{2: 0.5, 3: 0.2, 4: 0.3, 5: 0.1, 6: 0.1, 7: 2, 8: 0.5, 9: 3},
			n:     10,
			want: []string{"", "p1 [0 1]", "kf 2", "nk 3", "nk 4", "kf 5",
				"w1 rerun [4 5] gap 0, p1 [4 5], kf 6", "kf 7",
				"w2 rerun [6 7] gap 0, p1 [6 7], kf 8", "kf 9", ""},
		},
		{
			// a window of two streaming keyframes and an overlap of 3:
			// the overlap would reach into its scale frames, frame 1 is
			// dropped
			name: "flow windows drop overlap frames",
			cfg: schedConfig(func(c *Config) {
				c.Windowed, c.FlowThreshold, c.OverlapSize = true, 1, 3
			}),
			flows: map[uint64]float64{2: 0, 3: 5, 4: 0, 5: 5},
			n:     6,
			want: []string{"", "p1 [0 1]", "kf 2", "kf 3",
				"w1 rerun [2 3] gap 0 drop 1, p1 [2 3], kf 4", "kf 5", ""},
		},
		{
			name:  "streaming flow keyframes",
			cfg:   schedConfig(func(c *Config) { c.FlowThreshold = 1 }),
			flows: map[uint64]float64{2: 0, 3: 0, 4: 1.5, 5: 0, 6: 0, 7: 0, 8: 0},
			n:     9,
			want:  []string{"", "p1 [0 1]", "kf 2", "nk 3", "kf 4", "nk 5", "nk 6", "kf 7", "nk 8", ""},
		},
		{
			// overlap < scale frames + 1: serial changes; window 0 ends
			// overlap−scale = 0 frames early, windows re-run the first
			// scale frames of the overlap
			name: "live windows, serial",
			cfg: schedConfig(func(c *Config) {
				c.Windowed, c.WindowMode = true, WindowLive
			}),
			n: 8,
			want: []string{"", "p1 [0 1]", "kf 2", "kf 3",
				"w1 rerun [2 3] gap 0, p1 [2 3], kf 4", "kf 5",
				"w2 rerun [4 5] gap 0, p1 [4 5], kf 6", "kf 7", ""},
		},
		{
			// windows of 2 + 4 = 6 positions, window 0 one early (5); the
			// next window warms up on the overlap's scale frames (positions
			// 2 and 3 of window 0) and skips the third (its gap)
			name: "live windows, early start",
			cfg: schedConfig(func(c *Config) {
				c.Windowed, c.WindowMode, c.WindowSize, c.OverlapSize = true, WindowLive, 6, 3
			}),
			n: 10,
			want: []string{"", "p1 [0 1]",
				"kf 2, warm w1, +[2], left 3",
				"kf 3, +[3], bg p1 [2 3], left 2",
				"kf 4, left 1",
				"w1 rerun [2 3] gap 1 warmed, kf 5, warm w2, +[5], left 3",
				"kf 6, +[6], bg p1 [5 6], left 2",
				"kf 7, left 1",
				"w2 rerun [5 6] gap 1 warmed, kf 8, warm w3, +[8], left 3",
				"kf 9, +[9], bg p1 [8 9], left 2",
				""},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := &driver{p: newSchedule(tc.cfg), flows: tc.flows}
			var got []string
			for i := range tc.n {
				got = append(got, d.push(uint64(i)))
			}
			got = append(got, d.flush())
			if !slices.Equal(got, tc.want) {
				t.Errorf("plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestScheduleDecideSeesEveryFlowDecision: Config.Decide sees each flow
// decision in order with the rule's verdict and overrides it, and the
// override moves the keyframe reference the gap rule counts from.
func TestScheduleDecideSeesEveryFlowDecision(t *testing.T) {
	type dec struct {
		i    int
		flow float64
		kf   bool
	}
	var seen []dec
	cfg := schedConfig(func(c *Config) {
		c.FlowThreshold = 1
		c.Decide = func(i int, flow float64, kf bool) bool {
			seen = append(seen, dec{i, flow, kf})
			return kf != (i == 1) // frame 3 becomes a keyframe
		}
	})
	d := &driver{p: newSchedule(cfg), flows: map[uint64]float64{2: 0, 3: 0.5, 4: 0, 5: 0, 6: 0, 7: 0}}
	var got []string
	for i := range 8 {
		got = append(got, d.push(uint64(i)))
	}
	// frame 6 is forced 3 frames after frame 3, not frame 2
	want := []string{"", "p1 [0 1]", "kf 2", "kf 3", "nk 4", "nk 5", "kf 6", "nk 7"}
	if !slices.Equal(got, want) {
		t.Errorf("plan %q, want %q", got, want)
	}
	wantSeen := []dec{{0, 0, true}, {1, 0.5, false}, {2, 0, false}, {3, 0, false}, {4, 0, true}, {5, 0, false}}
	if !slices.Equal(seen, wantSeen) {
		t.Errorf("Decide saw %v, want %v", seen, wantSeen)
	}
	if d.p.win.lastKF[0] != 6 || d.p.win.lastKn != 6 || d.p.win.kfs != 3 {
		t.Errorf("flow reference frame %v (local %d), %d keyframes; want frame 6, local 6, 3", d.p.win.lastKF[0], d.p.win.lastKn, d.p.win.kfs)
	}
}

// resumed is a schedule restored from a state file: its counters and
// buffers, not the warm-up (the state file leaves it out).
func resumed(p schedule) schedule {
	q := p
	w := *p.win
	w.buf, w.tail = slices.Clone(w.buf), slices.Clone(w.tail)
	q.win = &w
	q.recent = slices.Clone(p.recent)
	return q
}

// TestScheduleResume: a schedule restored after any push plans the rest as
// the uninterrupted one does; a live warm-up cut off by the save starts
// again late, on the scale frames that came (kept in the last inputs).
func TestScheduleResume(t *testing.T) {
	cfgs := map[string]Config{
		"reference interval 2": schedConfig(func(c *Config) { c.Windowed, c.KeyframeInterval = true, 2 }),
		"flow windows":         schedConfig(func(c *Config) { c.Windowed, c.FlowThreshold, c.OverlapSize = true, 1, 3 }),
		"live serial":          schedConfig(func(c *Config) { c.Windowed, c.WindowMode = true, WindowLive }),
		"streaming phase 1":    schedConfig(func(c *Config) { c.ScaleFrames = 4 }),
	}
	flows := map[uint64]float64{2: 0, 3: 5, 4: 0, 5: 0.2, 6: 5, 7: 0, 8: 0, 9: 3, 10: 0, 11: 0}
	const n = 12
	for name, cfg := range cfgs {
		t.Run(name, func(t *testing.T) {
			d := &driver{p: newSchedule(cfg), flows: flows}
			var want []string
			for i := range n {
				want = append(want, d.push(uint64(i)))
			}
			want = append(want, d.flush())
			for k := range n {
				d := &driver{p: newSchedule(cfg), flows: flows}
				var got []string
				for i := range k {
					got = append(got, d.push(uint64(i)))
				}
				d = &driver{p: resumed(d.p), flows: flows}
				for i := k; i < n; i++ {
					got = append(got, d.push(uint64(i)))
				}
				got = append(got, d.flush())
				if !slices.Equal(got, want) {
					t.Fatalf("resumed after %d pushes:\n%s\nwant:\n%s", k, strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			}
		})
	}

	// live early start: resumed after frame 3, the warm-up of window 1
	// starts again at frame 4 with both its scale frames
	cfg := schedConfig(func(c *Config) {
		c.Windowed, c.WindowMode, c.WindowSize, c.OverlapSize = true, WindowLive, 6, 3
	})
	d := &driver{p: newSchedule(cfg)}
	for i := range 4 {
		d.push(uint64(i))
	}
	d = &driver{p: resumed(d.p)}
	var got []string
	for i := 4; i < 7; i++ {
		got = append(got, d.push(uint64(i)))
	}
	want := []string{
		"kf 4, warm w1, +[2 3], bg p1 [2 3], left 1",
		"w1 rerun [2 3] gap 1 warmed, kf 5, warm w2, +[5], left 3",
		"kf 6, +[6], bg p1 [5 6], left 2",
	}
	if !slices.Equal(got, want) {
		t.Errorf("live resume:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
