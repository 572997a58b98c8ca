package source

import (
	"image"
	"image/color"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine"
)

// A folder with an undecodable image in its middle yields every other
// image, counts the bad one, and reports 16-bit grey once.
func TestFolderSkipsBadImagesAndNotices16Bit(t *testing.T) {
	dir := t.TempDir()
	rgb := image.NewRGBA(image.Rect(0, 0, 16, 12))
	g16 := image.NewGray16(image.Rect(0, 0, 16, 12))
	for i := range 16 {
		g16.SetGray16(i, 3, color.Gray16{Y: 4000})
	}
	writePNG(t, filepath.Join(dir, "000.png"), rgb)
	if err := os.WriteFile(filepath.Join(dir, "001.png"), []byte("\x89PNG\r\n\x1a\ncut"), 0o644); err != nil {
		t.Fatal(err)
	}
	writePNG(t, filepath.Join(dir, "002.png"), g16)
	writePNG(t, filepath.Join(dir, "003.png"), g16)
	writePNG(t, filepath.Join(dir, "004.png"), rgb)

	f, err := OpenFolder(dir, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	var notices []string
	eachFrame(t, f, func(fr engine.Frame) {
		seqs = append(seqs, fr.Seq)
		notices = append(notices, f.Notices()...)
	})
	if len(seqs) != 4 || seqs[0] != 0 || seqs[1] != 2 || seqs[3] != 4 {
		t.Errorf("frames %v, want 0 2 3 4", seqs)
	}
	n, first := f.Skipped()
	if n != 1 || first == nil || !strings.Contains(first.Error(), "001.png") {
		t.Errorf("skipped %d, first %v", n, first)
	}
	if len(notices) != 1 || !strings.Contains(notices[0], "16-bit grey") || !strings.Contains(notices[0], "002.png") {
		t.Errorf("notices %q, want one about 16-bit grey in 002.png", notices)
	}
}
