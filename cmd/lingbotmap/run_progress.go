package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

// progress reports what the run is doing and the frames mapped (results
// written, not frames read): a status line on a terminal, log lines
// otherwise. Its methods may be called from any goroutine.
type progress interface {
	// phase says what the program is doing now (phase 1, flushing,
	// saving, stopping), shown at once.
	phase(what string)
	// add counts n frames mapped.
	add(n int)
	finish()
}

// rateMeter turns mapped-frame counts into a rate and an ETA. Results come
// in bursts (phase 1 delivers its scale frames together after a long
// wait), so the rate is measured from the end of the first burst: a
// frame that follows the one before within burstGap extends the burst.
type rateMeter struct {
	total, done int
	ref         time.Time // end of the first burst
	refDone     int
	last        time.Time
}

const burstGap = 50 * time.Millisecond

func (r *rateMeter) add(n int, now time.Time) {
	r.done += n
	switch {
	case r.ref.IsZero():
		r.ref, r.refDone = now, r.done
	case r.done-n == r.refDone && now.Sub(r.last) < burstGap:
		r.ref, r.refDone = now, r.done
	}
	r.last = now
}

// rate is frames per second since the first burst, 0 until it can be
// measured (two seconds and one frame after the burst).
func (r *rateMeter) rate(now time.Time) float64 {
	el := now.Sub(r.ref)
	if r.ref.IsZero() || el < 2*time.Second || r.done <= r.refDone {
		return 0
	}
	return float64(r.done-r.refDone) / el.Seconds()
}

// eta is the time left at the measured rate, or -1 if unknown.
func (r *rateMeter) eta(now time.Time) time.Duration {
	fps := r.rate(now)
	if fps <= 0 || r.total <= 0 {
		return -1
	}
	return time.Duration(float64(max(r.total-r.done, 0)) / fps * float64(time.Second))
}

// status is the one-line summary of the meter and the phase.
func (r *rateMeter) status(what string, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d", what, r.done)
	if r.total > 0 {
		fmt.Fprintf(&b, " of %d", r.total)
	}
	b.WriteString(" frames mapped")
	if fps := r.rate(now); fps > 0 {
		fmt.Fprintf(&b, ", %.2f frames/s", fps)
	}
	if eta := r.eta(now); eta >= 0 {
		fmt.Fprintf(&b, ", about %s left", eta.Round(time.Second))
	}
	return b.String()
}

func newProgress(o *runOptions, total int, log *slog.Logger) progress {
	if f, ok := o.stderr.(*os.File); ok && !o.noProgress && !o.quiet && term.IsTerminal(int(f.Fd())) {
		return &lineProgress{w: f, m: rateMeter{total: total}, what: "mapping", now: time.Now}
	}
	return &logProgress{log: log, m: rateMeter{total: total}, what: "mapping", every: 5 * time.Second, now: time.Now}
}

// lineProgress rewrites one status line on a terminal, at most five
// times a second but at once for a new phase.
type lineProgress struct {
	mu    sync.Mutex
	w     io.Writer
	m     rateMeter
	what  string
	shown time.Time
	now   func() time.Time
}

func (p *lineProgress) draw(force bool) {
	now := p.now()
	if !force && now.Sub(p.shown) < 200*time.Millisecond {
		return
	}
	p.shown = now
	fmt.Fprintf(p.w, "\r\033[K%s", p.m.status(p.what, now))
}

func (p *lineProgress) phase(what string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.what = what
	p.draw(true)
}

func (p *lineProgress) add(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m.add(n, p.now())
	p.draw(false)
}

func (p *lineProgress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draw(true)
	fmt.Fprintln(p.w)
}

// logProgress logs each new phase, and the frames mapped every few
// seconds.
type logProgress struct {
	mu    sync.Mutex
	log   *slog.Logger
	m     rateMeter
	what  string
	last  time.Time
	every time.Duration
	now   func() time.Time
}

func (p *logProgress) phase(what string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if what == p.what {
		return
	}
	p.what = what
	p.log.Info(what, "frames_mapped", p.m.done)
}

func (p *logProgress) add(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	p.m.add(n, now)
	if p.last.IsZero() {
		p.last = now
	}
	if now.Sub(p.last) < p.every {
		return
	}
	p.last = now
	args := []any{"frames_mapped", p.m.done}
	if p.m.total > 0 {
		args = append(args, "of", p.m.total)
	}
	if fps := p.m.rate(now); fps > 0 {
		args = append(args, "frames_per_s", fmt.Sprintf("%.2f", fps))
	}
	if eta := p.m.eta(now); eta >= 0 {
		args = append(args, "eta", eta.Round(time.Second).String())
	}
	p.log.Info("progress", args...)
}

func (p *logProgress) finish() {}
