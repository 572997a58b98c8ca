package mapio

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

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
// what atomicfile.WriteFileNoSync wrote becomes durable.
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
