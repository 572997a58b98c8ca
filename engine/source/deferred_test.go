package source

import (
	"context"
	"errors"
	"image"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Deferred decoding yields, frame for frame, what Next yields: the same
// sequence numbers, stamps and pixels (EXIF orientation and --rotate-cw90
// applied), decoded concurrently on other goroutines; a frame that does not
// decode fails in its Decode, naming its file, and is left to the caller to
// count; a 16-bit notice is given once.
func TestFolderDeferredMatchesNext(t *testing.T) {
	dir := t.TempDir()
	g16 := image.NewGray16(image.Rect(0, 0, 16, 12))
	for i := range 16 {
		g16.SetGray16(i, 3, color.Gray16{Y: 4000})
	}
	for i := range 6 {
		if i == 2 {
			if err := os.WriteFile(filepath.Join(dir, "002.png"), []byte("\x89PNG\r\n\x1a\ncut"), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if i == 4 {
			writePNG(t, filepath.Join(dir, "004.png"), g16)
			continue
		}
		img := image.NewRGBA(image.Rect(0, 0, 16, 12))
		for y := range 12 {
			for x := range 16 {
				img.Set(x, y, color.RGBA{uint8(16*x + i), uint8(20 * y), uint8(i * 40), 255})
			}
		}
		writePNG(t, filepath.Join(dir, "00"+string(rune('0'+i))+".png"), img)
	}
	opt := DefaultOptions()
	opt.RotateCW90 = true
	opt.Stride = 1

	serial, err := OpenFolder(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	want := readAll(t, serial)

	f, err := OpenFolder(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	var frames []DeferredFrame
	for {
		d, err := f.NextDeferred(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, d)
	}
	if len(frames) != 6 {
		t.Fatalf("%d deferred frames, want 6 (the bad one included)", len(frames))
	}
	imgs := make([]image.Image, len(frames))
	errs := make([]error, len(frames))
	var wg sync.WaitGroup
	for i, d := range frames {
		wg.Go(func() { imgs[i], errs[i] = d.Decode() })
	}
	wg.Wait()
	if errs[2] == nil || !strings.Contains(errs[2].Error(), "002.png") {
		t.Errorf("the cut image decoded: %v", errs[2])
	}
	if n, _ := f.Skipped(); n != 0 {
		t.Errorf("the folder counted %d skipped images itself", n)
	}
	k := 0
	for i, d := range frames {
		if i == 2 {
			continue
		}
		if errs[i] != nil {
			t.Fatalf("frame %d: %v", i, errs[i])
		}
		w := want[k]
		k++
		if d.Seq != w.Seq || !d.Stamp.Equal(w.Stamp) {
			t.Errorf("frame %d: seq %d stamp %v, Next gives %d %v", i, d.Seq, d.Stamp, w.Seq, w.Stamp)
		}
		b := imgs[i].Bounds()
		if b != w.Image.Bounds() || b.Dx() != 12 || b.Dy() != 16 {
			t.Fatalf("frame %d: bounds %v, Next gives %v (turned: 12×16)", i, b, w.Image.Bounds())
		}
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				if imgs[i].At(x, y) != w.Image.At(x, y) {
					t.Fatalf("frame %d: pixel (%d,%d) %v, Next gives %v", i, x, y, imgs[i].At(x, y), w.Image.At(x, y))
				}
			}
		}
	}
	if n := f.Notices(); len(n) != 1 || !strings.Contains(n[0], "004.png") {
		t.Errorf("notices %q, want one about 004.png", n)
	}
}
