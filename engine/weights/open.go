package weights

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Open opens a checkpoint of any supported kind, chosen by content rather
// than by file name: a .safetensors file, a zip-format torch.save file
// (.pt/.pth), a model.safetensors.index.json, or a directory holding one of those.
func Open(path string) (Store, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("weights: cannot open checkpoint: %w", err)
	}
	if st.IsDir() {
		return openDir(path)
	}
	head, err := readHead(path, 16)
	if err != nil {
		return nil, fmt.Errorf("weights: %s: %w", path, err)
	}
	switch {
	case bytes.HasPrefix(head, []byte("PK\x03\x04")):
		return OpenPT(path)
	case looksLikeSafeTensors(head, st.Size()):
		return OpenSafeTensors(path)
	case len(head) > 0 && head[0] == 0x80:
		return nil, fmt.Errorf("weights: %s: a PyTorch pickle in the legacy (pre-1.6, non-zip) torch.save format, which is not supported: re-save it with torch.save(state_dict, path) from a current PyTorch", path)
	case len(bytes.TrimLeft(head, " \t\r\n")) > 0 && bytes.TrimLeft(head, " \t\r\n")[0] == '{':
		return OpenSharded(path)
	}
	return nil, fmt.Errorf("weights: %s: not a checkpoint: expected a .safetensors file, a PyTorch zip checkpoint (.pt) or a %s", path, IndexFile)
}

func looksLikeSafeTensors(head []byte, size int64) bool {
	if len(head) < 9 {
		return false
	}
	n := binary.LittleEndian.Uint64(head)
	return n <= maxHeader && n <= uint64(size-8) && head[8] == '{'
}

func readHead(path string, n int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, n)
	k, err := io.ReadFull(f, b)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return nil, err
	}
	return b[:k], nil
}

func openDir(dir string) (Store, error) {
	if _, err := os.Stat(filepath.Join(dir, IndexFile)); err == nil {
		return OpenSharded(dir)
	}
	st, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	switch len(st) {
	case 0:
	case 1:
		return OpenSafeTensors(st[0])
	default:
		return OpenSharded(dir)
	}
	var pts []string
	for _, pat := range []string{"*.pt", "*.pth"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		pts = append(pts, m...)
	}
	switch len(pts) {
	case 1:
		return OpenPT(pts[0])
	case 0:
		return nil, fmt.Errorf("weights: %s: no checkpoint in the directory (looked for %s, *.safetensors, *.pt, *.pth)", dir, IndexFile)
	}
	return nil, fmt.Errorf("weights: %s: %d PyTorch checkpoints in the directory (%v): name the file to use", dir, len(pts), pts)
}
