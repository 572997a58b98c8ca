package weights

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"unsafe"
)

// mappedFile is an open checkpoint file plus a read-only shared mapping of
// all of it. Headers, zip directories and pickles are parsed from the
// mapping, and RawBytes hands out views of it, so opening costs no memory up
// front; Float32 reads with pread instead (see readFloat32).
type mappedFile struct {
	f    *os.File
	data []byte
}

func mapFile(path string) (*mappedFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	m, err := mapOpened(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return m, nil
}

func mapOpened(f *os.File) (*mappedFile, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	size := st.Size()
	if size == 0 {
		return nil, errors.New("the file is empty")
	}
	if int64(int(size)) != size {
		return nil, fmt.Errorf("file of %d bytes is too large to map", size)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	return &mappedFile{f: f, data: data}, nil
}

func (m *mappedFile) closed() bool { return m != nil && m.data == nil }

func (m *mappedFile) close() error {
	if m == nil || m.data == nil {
		return nil
	}
	err := syscall.Munmap(m.data)
	m.data = nil
	return errors.Join(err, m.f.Close())
}

// readFloat32 converts bytes [off, off+n) of a file image of dtype to
// float32. For a file it reads them with pread, for F32 straight into the
// result: the file's pages are then never mapped into this process (they
// stay in the kernel's page cache, which it can drop), so loading the 4.6 GB
// checkpoint costs one copy of the weights, not the copy plus the resident
// mapping. In-memory images (m == nil) are decoded from data.
func readFloat32(m *mappedFile, data []byte, dtype string, off, n int64) ([]float32, error) {
	if m == nil {
		return DecodeFloat32(dtype, data[off:off+n])
	}
	if m.closed() {
		return nil, errors.New("the checkpoint file is closed")
	}
	if dtype == "F32" && littleEndianHost() && n%4 == 0 {
		out := make([]float32, n/4)
		if n > 0 {
			if _, err := m.f.ReadAt(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), n), off); err != nil {
				return nil, readErr(err)
			}
		}
		return out, nil
	}
	buf := make([]byte, n)
	if _, err := m.f.ReadAt(buf, off); err != nil {
		return nil, readErr(err)
	}
	return DecodeFloat32(dtype, buf)
}

func readErr(err error) error {
	if errors.Is(err, io.EOF) {
		return errors.New("the file is shorter than when it was opened (changed on disk?)")
	}
	return err
}
