// Package atomicfile writes files whole or not at all: the data goes to a
// temporary file beside the destination (".NAME.*"), which is renamed over
// it once complete, so a reader, a crash or a full disk never leaves a torn
// file at the path. It imports nothing of the project, so every layer
// (message codecs, checkpoints, maps) can use the one mechanism.
package atomicfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), f.path)
	}
	if err != nil {
		os.Remove(f.Name())
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
	return errors.Join(f.Close(), os.Remove(f.Name()))
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
