package preprocess

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Fixtures written by testdata/pillow/make_fixtures.py with Pillow itself
// (Debian's python3-pil 9.4.0 on libjpeg-turbo 2.1.5): resize cases the golden
// set does not cover (strong downscales, 1×1, one-axis resizes) and JPEGs in
// three chroma layouts, one with an EXIF orientation.

func TestPillowResizeFixtures(t *testing.T) {
	outs, err := filepath.Glob(filepath.Join("testdata", "pillow", "resize_*_*x*.png"))
	if err != nil || len(outs) < 8 {
		t.Fatalf("want 8 resize fixtures, found %d (%v)", len(outs), err)
	}
	for _, out := range outs {
		var i, w, h int
		if _, err := fmt.Sscanf(filepath.Base(out), "resize_%d_%dx%d.png", &i, &w, &h); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		src := decodeFile(t, filepath.Join("testdata", "pillow", fmt.Sprintf("resize_%d.png", i)))
		want := decodeFile(t, out)
		got, err := ResizeRGB(src, w, h)
		if err != nil {
			t.Fatal(err)
		}
		if d, n := byteDiff(got.Pix, want.Pix); n != 0 {
			t.Errorf("%d×%d → %d×%d: %d bytes differ from Pillow (max %d)", src.W, src.H, w, h, n, d)
		}
	}
}

// Go's JPEG decoder and libjpeg use different (both valid) integer IDCTs, so
// the samples can differ by a level or two before colour conversion; chroma
// upsampling and colour conversion follow libjpeg exactly (ycbcr.go). The
// bounds below hold with margin: measured max 3 levels, about 96.5% of bytes exact.
const (
	jpegMaxDiff    = 4
	jpegMinExact   = 0.95
	jpegPre518Diff = 6 // the bicubic kernel's negative lobes can amplify a ±3
)

func TestPillowJPEGFixtures(t *testing.T) {
	for _, name := range []string{"ycc420_orient6", "ycc422", "ycc444"} {
		got := decodeFile(t, filepath.Join("testdata", "pillow", name+".jpg"))
		want := decodeFile(t, filepath.Join("testdata", "pillow", name+"_decoded.png"))
		if got.W != want.W || got.H != want.H {
			t.Fatalf("%s: decoded %d×%d, Pillow %d×%d", name, got.W, got.H, want.W, want.H)
		}
		d, n := byteDiff(got.Pix, want.Pix)
		exact := 1 - float64(n)/float64(len(got.Pix))
		t.Logf("%s (%d×%d): max difference %d levels, %.2f%% of bytes exact", name, got.W, got.H, d, 100*exact)
		if d > jpegMaxDiff || exact < jpegMinExact {
			t.Errorf("%s: max difference %d (bound %d), %.2f%% exact (bound %.0f%%)", name, d, jpegMaxDiff, 100*exact, 100*jpegMinExact)
		}
	}

	f, err := os.Open(filepath.Join("testdata", "pillow", "ycc420_orient6.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	chw, w, h, err := Preprocess(img, 518, 14)
	if err != nil {
		t.Fatal(err)
	}
	want := decodeFile(t, filepath.Join("testdata", "pillow", "ycc420_orient6_pre518.png"))
	if w != want.W || h != want.H {
		t.Fatalf("preprocessed %d×%d, reference %d×%d", w, h, want.W, want.H)
	}
	d, n := byteDiff(ToRGB8(chw), want.Pix)
	t.Logf("oriented 4:2:0 JPEG → %d×%d: max difference %d levels, %.2f%% of bytes exact", w, h, d, 100*(1-float64(n)/float64(len(want.Pix))))
	if d > jpegPre518Diff {
		t.Errorf("max difference %d levels exceeds %d", d, jpegPre518Diff)
	}
}

func byteDiff(a, b []uint8) (maxDiff, n int) {
	if len(a) != len(b) {
		return 256, max(len(a), len(b))
	}
	for i := range a {
		d := int(a[i]) - int(b[i])
		if d < 0 {
			d = -d
		}
		if d != 0 {
			n++
		}
		maxDiff = max(maxDiff, d)
	}
	return maxDiff, n
}
