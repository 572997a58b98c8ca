package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"sync"

	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/internal/atomicfile"
)

// profiles gathers bench's CPU profile and execution trace of the timed part
// in memory and writes each file whole when they stop. Start and stop may
// come from different goroutines; stop is idempotent.
type profiles struct {
	cpuPath, tracePath string

	mu       sync.Mutex
	cpu, tr  bytes.Buffer
	started  bool
	stopped  bool
	firstErr error
}

// newProfiles checks that the files' folders take files before anything is
// timed; empty paths are off.
func newProfiles(cpuPath, tracePath string) (*profiles, error) {
	for _, p := range []string{cpuPath, tracePath} {
		if p == "" {
			continue
		}
		if err := mapio.ProbeDir(filepath.Dir(p)); err != nil {
			return nil, err
		}
	}
	return &profiles{cpuPath: cpuPath, tracePath: tracePath}, nil
}

// start begins both recordings (once).
func (p *profiles) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return nil
	}
	p.started = true
	if p.cpuPath != "" {
		if err := pprof.StartCPUProfile(&p.cpu); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
	}
	if p.tracePath != "" {
		if err := trace.Start(&p.tr); err != nil {
			if p.cpuPath != "" {
				pprof.StopCPUProfile()
			}
			p.cpuPath = ""
			return fmt.Errorf("--trace: %w", err)
		}
	}
	return nil
}

// stop ends the recordings and writes the files; later calls return the
// first call's error.
func (p *profiles) stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.started || p.stopped {
		return p.firstErr
	}
	p.stopped = true
	write := func(path string, b *bytes.Buffer) error {
		return atomicfile.WriteFile(path, func(w io.Writer) error {
			_, err := w.Write(b.Bytes())
			return err
		})
	}
	var errs []error
	if p.cpuPath != "" {
		pprof.StopCPUProfile()
		if err := write(p.cpuPath, &p.cpu); err != nil {
			errs = append(errs, fmt.Errorf("--cpuprofile: %w", err))
		}
	}
	if p.tracePath != "" {
		trace.Stop()
		if err := write(p.tracePath, &p.tr); err != nil {
			errs = append(errs, fmt.Errorf("--trace: %w", err))
		}
	}
	p.firstErr = errors.Join(errs...)
	return p.firstErr
}
