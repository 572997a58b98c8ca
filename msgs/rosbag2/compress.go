package rosbag2

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// maxDecoded bounds what one compressed message may decompress to, so that
// a damaged or hostile bag cannot make the reader allocate without limit.
const maxDecoded = 1 << 30

// decompressFile decompresses a zstd-compressed storage file (rosbag2's file
// compression) into a temporary file and returns its path; the caller
// removes it. Both storages need a file to seek in, so the copy is on disk,
// not in memory.
func decompressFile(path string) (string, error) {
	in, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer in.Close()
	d, err := zstd.NewReader(in, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return "", err
	}
	defer d.Close()
	ext := filepath.Ext(strings.TrimSuffix(filepath.Base(path), ".zstd"))
	out, err := os.CreateTemp("", "lingbotmap-rosbag2-*"+ext)
	if err != nil {
		return "", fmt.Errorf("decompressing %s: %w", filepath.Base(path), err)
	}
	if _, err = io.Copy(out, d); err == nil {
		err = out.Close()
	} else {
		out.Close()
	}
	if err != nil {
		os.Remove(out.Name())
		return "", fmt.Errorf("decompressing %s: %w", filepath.Base(path), err)
	}
	return out.Name(), nil
}

// zstdDecoder decompresses messages one at a time (rosbag2's message
// compression: each message's data is one zstd frame).
type zstdDecoder struct{ d *zstd.Decoder }

func newZstdDecoder() *zstdDecoder {
	// NewReader with a nil reader and valid options cannot fail.
	d, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxDecoded))
	return &zstdDecoder{d}
}

func (z *zstdDecoder) decode(data []byte) ([]byte, error) { return z.d.DecodeAll(data, nil) }

func (z *zstdDecoder) close() { z.d.Close() }
