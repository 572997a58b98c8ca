package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress reports frames done: a bar on a terminal, log lines otherwise.
type progress interface {
	add(n int)
	finish()
}

func newProgress(o *runOptions, total int, log *slog.Logger) progress {
	if f, ok := o.stderr.(*os.File); ok && !o.noProgress && !o.quiet && term.IsTerminal(int(f.Fd())) {
		bar := progressbar.NewOptions(total,
			progressbar.OptionSetWriter(f),
			progressbar.OptionSetDescription("mapping"),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("frames"),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionSetWidth(30),
		)
		return barProgress{bar, f}
	}
	return &logProgress{log: log, total: total, start: time.Now(), last: time.Now(), every: 5 * time.Second}
}

type barProgress struct {
	bar *progressbar.ProgressBar
	w   io.Writer
}

func (b barProgress) add(n int) { _ = b.bar.Add(n) }
func (b barProgress) finish() {
	_ = b.bar.Finish()
	fmt.Fprintln(b.w)
}

// logProgress writes a progress line every few seconds.
type logProgress struct {
	log         *slog.Logger
	total, done int
	start, last time.Time
	every       time.Duration
}

func (p *logProgress) add(n int) {
	p.done += n
	if time.Since(p.last) < p.every {
		return
	}
	p.last = time.Now()
	el := time.Since(p.start).Seconds()
	fps := float64(p.done) / el
	args := []any{"frames", p.done, "frames_per_s", fmt.Sprintf("%.2f", fps)}
	if p.total > 0 {
		args = append(args, "of", p.total)
		if fps > 0 {
			eta := time.Duration(float64(p.total-p.done) / fps * float64(time.Second))
			args = append(args, "eta", eta.Round(time.Second).String())
		}
	}
	p.log.Info("progress", args...)
}

func (p *logProgress) finish() {}
