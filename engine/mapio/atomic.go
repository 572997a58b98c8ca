package mapio

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// WriteFileAtomic writes a file so that a reader (rviz, a script, a second
// save) sees either the old file or the complete new one, even across a
// crash: write to a temporary file beside it, flush it to disk, rename it
// over path, then flush the directory. The file gets mode 0644.
func WriteFileAtomic(path string, write func(io.Writer) error) error {
	return writeFile(path, write, true)
}

func writeFile(path string, write func(io.Writer) error, durable bool) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
			err = fmt.Errorf("write %s: %w", path, err)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<16)
	if err := write(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if durable {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if !durable {
		return nil
	}
	// The rename is durable once the directory is; not every file system
	// lets a directory be synced, and the file is complete either way.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// WriteFileWhole is WriteFileAtomic without the flushes to disk: a reader
// or a process crash sees the old file or the complete new one, never a
// torn one, but after a power loss the file may be missing or empty. It
// suits many small files written as a stream goes (depth images), which
// SyncFS makes durable in one step at checkpoints.
func WriteFileWhole(path string, write func(io.Writer) error) error {
	return writeFile(path, write, false)
}

// ProbeDir checks that files can be created in dir (which must exist) by
// writing and removing a small file, so a read-only or full output folder
// is found before any expensive work.
func ProbeDir(dir string) error {
	f, err := os.CreateTemp(dir, ".lingbotmap-probe-*")
	if err != nil {
		return fmt.Errorf("output folder %s cannot be written: %w", dir, err)
	}
	_, err = f.Write([]byte("probe\n"))
	if err == nil {
		err = f.Sync()
	}
	err = errors.Join(err, f.Close(), os.Remove(f.Name()))
	if err != nil {
		return fmt.Errorf("output folder %s cannot be written: %w", dir, err)
	}
	return nil
}

// SyncFS flushes every file of the file system that holds dir to disk:
// what WriteFileWhole wrote becomes durable.
func SyncFS(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
