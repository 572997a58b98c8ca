// Package atomicfile writes files whole or not at all: the data goes to a
// temporary file beside the destination (".NAME.*"), which is renamed over
// it once complete, so a reader, a crash or a full disk never leaves a torn
// file at the path. It imports nothing of the project, so every layer
// (message codecs, checkpoints, maps) can use the one mechanism.
//
// A temporary file is flock'ed by its writer until it is renamed or
// removed, so the kernel tells a live writer's temporary file from one a
// killed process left behind: RemoveStale removes only the latter.
package atomicfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// File is a temporary file that becomes path on Commit, or disappears on
// Abort. Write to it as to any *os.File.
type File struct {
	*os.File
	path string
	done bool
}

// Create opens the temporary file for path, with mode 0644.
func Create(path string) (*File, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	// held until the rename or the removal (Close releases it): a live
	// writer's file is never taken for a stale one
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil && !Unsupported(err) {
		os.Remove(f.Name())
		f.Close()
		return nil, fmt.Errorf("atomicfile: locking %s: %w", f.Name(), err)
	}
	return &File{File: f, path: path}, nil
}

// Path is the destination.
func (f *File) Path() string { return f.path }

// Commit makes the file durable (its data, then the rename) and puts it at
// its path. On any error the temporary file is removed and nothing appears
// at the path.
func (f *File) Commit() error { return f.commit(true) }

// CommitNoSync renames the file into place without flushing it to disk: a
// reader or a process crash still sees the old file or the whole new one,
// but after a power loss the file may be missing or empty. It suits many
// small files that one SyncFS makes durable later.
func (f *File) CommitNoSync() error { return f.commit(false) }

func (f *File) commit(durable bool) error {
	if f.done {
		return errors.New("atomicfile: " + f.path + " was already committed or aborted")
	}
	f.done = true
	var err error
	if durable {
		err = f.Sync()
	}
	// renamed while still open (and locked), so RemoveStale never sees it
	// unlocked under its temporary name
	if err == nil {
		err = os.Rename(f.Name(), f.path)
	}
	if err != nil {
		os.Remove(f.Name())
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if durable {
		return SyncDir(filepath.Dir(f.path))
	}
	return nil
}

// Abort discards the file; nothing appears at its path. It does nothing
// after Commit or Abort.
func (f *File) Abort() error {
	if f.done {
		return nil
	}
	f.done = true
	rerr := os.Remove(f.Name())
	return errors.Join(f.Close(), rerr)
}

// Unsupported reports whether a flock error says the file system has no
// locks: writing goes on without them there (RemoveStale then cannot tell
// a live writer's file, and leaves none it cannot lock).
func Unsupported(err error) bool {
	return errors.Is(err, syscall.ENOLCK) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSYS)
}

// IsTemp reports whether name (a base name) is of the form of a temporary
// file of this package: ".NAME.DIGITS".
func IsTemp(name string) bool {
	if len(name) < 4 || name[0] != '.' {
		return false
	}
	i := strings.LastIndexByte(name, '.')
	if i <= 1 || i == len(name)-1 {
		return false
	}
	for _, c := range name[i+1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// RemoveStale removes the temporary files in dir (not below it) that no
// live writer holds: those a killed or crashed process left. It returns
// the names removed. A dir that does not exist holds none.
func RemoveStale(dir string) ([]string, error) {
	return removeStale(dir, func(string) bool { return true })
}

// RemoveStaleOf removes the temporary files of path alone (".NAME.*")
// that no live writer holds.
func RemoveStaleOf(path string) ([]string, error) {
	prefix := "." + filepath.Base(path) + "."
	return removeStale(filepath.Dir(path), func(name string) bool { return strings.HasPrefix(name, prefix) })
}

func removeStale(dir string, match func(string) bool) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		if !e.Type().IsRegular() || !IsTemp(e.Name()) || !match(e.Name()) {
			continue
		}
		ok, err := removeIfStale(filepath.Join(dir, e.Name()))
		if err != nil {
			errs = append(errs, err)
		} else if ok {
			removed = append(removed, e.Name())
		}
	}
	return removed, errors.Join(errs...)
}

// removeIfStale removes path if no one holds its lock, and it is still the
// file that was locked (not renamed away meanwhile).
func removeIfStale(path string) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) || Unsupported(err) {
			return false, nil // a live writer's, or no way to know
		}
		return false, fmt.Errorf("atomicfile: locking %s: %w", path, err)
	}
	held, err := f.Stat()
	if err != nil {
		return false, err
	}
	now, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) || (err == nil && !os.SameFile(held, now)) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	return true, nil
}

// SyncDir makes the renames in dir durable. A file system that cannot sync
// a directory (EINVAL) is not an error: the files themselves are complete.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}

// WriteFile writes path through a buffered temporary file and Commit.
func WriteFile(path string, write func(io.Writer) error) error {
	return writeFile(path, write, true)
}

// WriteFileNoSync is WriteFile with CommitNoSync.
func WriteFileNoSync(path string, write func(io.Writer) error) error {
	return writeFile(path, write, false)
}

func writeFile(path string, write func(io.Writer) error, durable bool) error {
	f, err := Create(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	bw := bufio.NewWriterSize(f, 1<<16)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		f.Abort()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.commit(durable); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
