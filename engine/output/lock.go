package output

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/lingbotmap/lingbotmap/internal/atomicfile"
)

// LockFile is the file in an output folder whose flock says which run owns
// the folder. The kernel releases the lock when that run ends, however it
// ends (a SIGKILL too), so a lock is never left stale; the file itself
// stays, holding the last owner's process id.
const LockFile = ".lingbotmap.lock"

// InUseError is an output folder that another live run owns.
type InUseError struct {
	Dir string
	PID int // the owner's process id, 0 if unknown
}

func (e *InUseError) Error() string {
	who := "another lingbotmap run"
	if e.PID > 0 {
		who = fmt.Sprintf("another lingbotmap run (process %d)", e.PID)
	}
	return fmt.Sprintf("output folder %s is in use by %s: wait for it to end, or choose another --out", e.Dir, who)
}

// DirLock is the ownership of an output folder, held until Close (or the
// process's end). Unlocked says the file system has no locks: the folder
// is then not protected from a second run.
type DirLock struct {
	f        *os.File
	Unlocked bool
}

// Lock makes dir if missing and takes its lock: an *InUseError when a live
// run holds it.
func Lock(dir string) (*DirLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("output folder: %w", err)
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("output folder: lock: %w", err)
	}
	unlocked := false
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); atomicfile.Unsupported(err) {
		unlocked = true
	} else if err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			b, _ := os.ReadFile(path)
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			return nil, &InUseError{Dir: dir, PID: pid}
		}
		return nil, fmt.Errorf("output folder: lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &DirLock{f: f, Unlocked: unlocked}, nil
}

// Close releases the folder.
func (l *DirLock) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the last descriptor releases the flock
	l.f = nil
	return err
}

// RemoveStale removes the temporary files that a killed run left in the
// output folder and its subfolders (a half-written map.ply, a session
// being saved, per-frame images): atomicfile's, which no live writer
// holds. Call it with the folder's lock held.
func RemoveStale(dir string, log *slog.Logger) error {
	var removed []string
	var errs []error
	for _, sub := range []string{"", SessionDir, "depth", "depth_color", "conf"} {
		names, err := atomicfile.RemoveStale(filepath.Join(dir, sub))
		errs = append(errs, err)
		for _, n := range names {
			removed = append(removed, filepath.Join(sub, n))
		}
	}
	if len(removed) > 0 {
		log.Info("removed temporary files a stopped run left", "out", dir, "files", firstNames(removed), "count", len(removed))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("output folder: removing stale temporary files: %w", err)
	}
	return nil
}
