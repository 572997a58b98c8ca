package preprocess

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lingbotmap/lingbotmap/internal/shared/sharedtest"
)

func TestOverWhite(t *testing.T) {
	for v := range 256 {
		c := uint8(v)
		if r, g, b := overWhite(c, c, c, 255); r != c || g != c || b != c {
			t.Fatalf("opaque %d composited to %d,%d,%d", c, r, g, b)
		}
		if r, _, _ := overWhite(c, 0, 0, 0); r != 255 {
			t.Fatalf("transparent pixel composited to %d, want white", r)
		}
	}
	// Within one level of the exact blend everywhere.
	for a := range 256 {
		for s := range 256 {
			r, _, _ := overWhite(uint8(s), 0, 0, uint8(a))
			exact := (float64(s)*float64(a) + 255*float64(255-a)) / 255
			if math.Abs(float64(r)-exact) > 1 {
				t.Fatalf("s=%d a=%d: %d, exact %.2f", s, a, r, exact)
			}
		}
	}
}

// The golden RGBA image must really exercise partial alpha, or the exact
// match of its preprocessing proves nothing about the compositing.
func TestGoldenRGBAHasPartialAlpha(t *testing.T) {
	f, err := os.Open(sharedtest.Path(t, "golden", "preprocess", "rgba_400x300.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := img.(*image.NRGBA)
	if !ok {
		t.Fatalf("RGBA PNG decoded as %T", img)
	}
	partial, naiveDiffers := 0, 0
	for i := 0; i < len(m.Pix); i += 4 {
		a := m.Pix[i+3]
		if a == 0 || a == 255 {
			continue
		}
		partial++
		r, _, _ := overWhite(m.Pix[i], m.Pix[i+1], m.Pix[i+2], a)
		naive := math.Round((float64(m.Pix[i])*float64(a) + 255*float64(255-a)) / 255)
		if float64(r) != naive {
			naiveDiffers++
		}
	}
	t.Logf("%d partially transparent pixels, %d where rounded float compositing differs from Pillow's", partial, naiveDiffers)
	if partial < 1000 {
		t.Fatalf("only %d partially transparent pixels", partial)
	}
}

func TestTargetSize(t *testing.T) {
	for _, c := range []struct{ w, h, width, patch, ww, wh int }{
		{518, 294, 518, 14, 518, 294},
		{640, 480, 518, 14, 518, 392},   // 27.75 patches → 28
		{360, 640, 518, 14, 518, 924},   // 65.78 → 66, cropped later
		{518, 294, 70, 14, 70, 42},      // 2.84 → 3
		{518, 21, 518, 14, 518, 28},     // exactly 1.5 patches: half to even → 2
		{518, 35, 518, 14, 518, 28},     // exactly 2.5 → 2
		{518, 49, 518, 14, 518, 56},     // exactly 3.5 → 4
		{1920, 1080, 518, 14, 518, 294}, // 20.81 → 21
	} {
		w, h, err := TargetSize(c.w, c.h, c.width, c.patch)
		if err != nil || w != c.ww || h != c.wh {
			t.Errorf("TargetSize(%d×%d, %d, %d) = %d×%d, %v; want %d×%d", c.w, c.h, c.width, c.patch, w, h, err, c.ww, c.wh)
		}
	}
	for _, c := range [][4]int{{518, 5, 518, 14}, {0, 10, 518, 14}, {10, 10, 0, 14}, {10, 10, 518, 0}, {1, 1 << 20, 518, 14}} {
		if _, _, err := TargetSize(c[0], c[1], c[2], c[3]); err == nil {
			t.Errorf("TargetSize%v accepted", c)
		}
	}
}

func TestPreprocessErrors(t *testing.T) {
	if _, _, _, err := Preprocess(nil, 518, 14); err == nil {
		t.Error("nil image accepted")
	}
	if _, _, _, err := Preprocess(image.NewRGBA(image.Rect(0, 0, 0, 5)), 518, 14); err == nil {
		t.Error("empty image accepted")
	}
	if _, _, _, err := Preprocess(image.NewRGBA(image.Rect(0, 0, 100, 1)), 518, 14); err == nil {
		t.Error("a 100×1 strip (height rounds to 0 patches) accepted")
	}
	if _, err := ResizeRGB(RGB{W: 2, H: 2, Pix: make([]uint8, 5)}, 4, 4); err == nil {
		t.Error("short pixel buffer accepted")
	}
	if _, err := ResizeRGB(RGB{W: 2, H: 2, Pix: make([]uint8, 12)}, 0, 4); err == nil {
		t.Error("zero output width accepted")
	}
}

func TestToRGB8RoundTrip(t *testing.T) {
	src := decodeFile(t, sharedtest.Path(t, "golden", "preprocess", "portrait_360x640.png"))
	resized, err := ResizeRGB(src, 518, 924)
	if err != nil {
		t.Fatal(err)
	}
	var p Preprocessor
	p.Width, p.Patch = 518, 14
	chw, w, h, err := p.Run(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w != 518 || h != 518 {
		t.Fatalf("portrait → %d×%d, want 518×518", w, h)
	}
	// The crop keeps rows [(924−518)/2, +518) = [203, 721).
	want := resized.Pix[3*203*518 : 3*721*518]
	if got := ToRGB8(chw); !bytes.Equal(got, want) {
		t.Fatal("ToRGB8 of the preprocessed portrait is not the centre crop of the resized bytes")
	}
	// Colours skips the round trip and gives the same bytes, in a slice of
	// its own
	cols := p.Colours()
	if !bytes.Equal(cols, want) {
		t.Fatal("Colours differ from ToRGB8 of the same Run")
	}
	every := make([]float32, 3*256)
	for i := range 256 {
		every[i], every[256+i], every[512+i] = float32(i)/255, float32(i)/255, float32(i)/255
	}
	for i, v := range ToRGB8(every) {
		if int(v) != i/3 {
			t.Fatalf("byte %d does not survive /255 and ToRGB8: %d", i/3, v)
		}
	}
	grey := RGB{W: 360, H: 640, Pix: bytes.Repeat([]uint8{7}, 3*360*640)}
	if _, _, _, err := p.Run(grey, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cols, want) {
		t.Fatal("a later Run changed the colours an earlier Colours returned")
	}
	if got := ToRGB8([]float32{-1, float32(math.NaN()), 2}); !slices.Equal(got, []uint8{0, 0, 255}) {
		t.Fatalf("clamping: %v", got)
	}
}

// A downscale by a non-integer factor compared with values worked out by hand
// from Pillow's formulas: 4 → 3 samples, support 2·4/3, one row.
func TestResizeHandWorked(t *testing.T) {
	src := RGB{W: 4, H: 1, Pix: []uint8{0, 0, 0, 100, 100, 100, 200, 200, 200, 250, 250, 250}}
	out, err := ResizeRGB(src, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Output 0: centre 2/3, taps x=0..2 at distances (x+0.5−2/3)·3/4:
	// weights k(−0.125)=0.96387, k(0.625)=0.38965, k(1.375)=−0.07324 (a = −0.5),
	// sum 1.28028 → (0·0.96387 + 100·0.38965 − 200·0.07324)/1.28028 = 18.99 → 19.
	if got := out.Pix[0]; got != 19 {
		t.Errorf("first sample %d, want 19", got)
	}
	// The mirror-image sample of a linear ramp 0,100,200,300 would be 300−15.95;
	// here the last input is 250, so only check the middle one: centre 2, taps 0..3
	// symmetric around 1.5 → (0+250)·w1 + (100+200)·w0 with w0 = k(0.375)/s, w1 = k(1.125)/s.
	k0, k1 := bicubic(0.375), bicubic(1.125)
	mid := (250*k1 + 300*k0) / (2*k0 + 2*k1)
	if got := out.Pix[3]; math.Abs(float64(got)-mid) > 0.5 {
		t.Errorf("middle sample %d, want %.2f", got, mid)
	}
}

func TestResizerReuse(t *testing.T) {
	src := decodeFile(t, sharedtest.Path(t, "data", "oxford", "000000.png"))
	r := Resizer{Workers: 1} // goroutines of a parallel resize allocate a little
	a, err := r.Resize(src, 300, 200, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := slices.Clone(a.Pix)
	b, err := r.Resize(src, 300, 200, a.Pix)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, b.Pix) {
		t.Fatal("a reused Resizer gave different bytes")
	}
	par := Resizer{Workers: 4}
	if c, err := par.Resize(src, 300, 200, nil); err != nil || !bytes.Equal(first, c.Pix) {
		t.Fatalf("4 workers gave different bytes from 1 (%v)", err)
	}
	allocs := testing.AllocsPerRun(3, func() {
		if _, err := r.Resize(src, 300, 200, b.Pix); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per same-size resize, want 0", allocs)
	}
	// Width-only and height-only resizes skip a pass, as Pillow does.
	c, err := ResizeRGB(src, src.W, 100)
	if err != nil || c.W != src.W || c.H != 100 {
		t.Fatalf("height-only resize: %d×%d, %v", c.W, c.H, err)
	}
	d, err := ResizeRGB(src, 100, src.H)
	if err != nil || d.W != 100 || d.H != src.H {
		t.Fatalf("width-only resize: %d×%d, %v", d.W, d.H, err)
	}
}

// asymmetric is a 4×2 image with distinct, JPEG-robust block colours.
func asymmetric(bs int) *image.NRGBA {
	cols := [2][4]color.NRGBA{
		{{255, 0, 0, 255}, {0, 255, 0, 255}, {0, 0, 255, 255}, {255, 255, 255, 255}},
		{{0, 0, 0, 255}, {255, 255, 0, 255}, {0, 255, 255, 255}, {255, 0, 255, 255}},
	}
	m := image.NewNRGBA(image.Rect(0, 0, 4*bs, 2*bs))
	for y := range 2 * bs {
		for x := range 4 * bs {
			m.SetNRGBA(x, y, cols[y/bs][x/bs])
		}
	}
	return m
}

// exifTIFF is a minimal big- or little-endian TIFF block with IFD0 holding the orientation.
func exifTIFF(orient int, bo binary.ByteOrder) []byte {
	b := make([]byte, 8+2+12+4)
	if bo == binary.LittleEndian {
		copy(b, "II")
	} else {
		copy(b, "MM")
	}
	bo.PutUint16(b[2:], 42)
	bo.PutUint32(b[4:], 8)
	bo.PutUint16(b[8:], 1)
	bo.PutUint16(b[10:], 0x0112)
	bo.PutUint16(b[12:], 3)
	bo.PutUint32(b[14:], 1)
	bo.PutUint16(b[18:], uint16(orient))
	return b
}

func jpegWithOrientation(t testing.TB, img image.Image, orient int) []byte {
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 95}); err != nil {
		t.Fatal(err)
	}
	payload := append([]byte("Exif\x00\x00"), exifTIFF(orient, binary.BigEndian)...)
	seg := []byte{0xff, 0xe1, 0, 0}
	binary.BigEndian.PutUint16(seg[2:], uint16(len(payload)+2))
	data := buf.Bytes()
	return slices.Concat(data[:2], seg, payload, data[2:])
}

func pngWithOrientation(t testing.TB, img image.Image, orient int) []byte {
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	body := exifTIFF(orient, binary.LittleEndian)
	chunk := make([]byte, 8, 12+len(body))
	binary.BigEndian.PutUint32(chunk, uint32(len(body)))
	copy(chunk[4:], "eXIf")
	chunk = append(chunk, body...)
	chunk = binary.BigEndian.AppendUint32(chunk, crc32.ChecksumIEEE(chunk[4:]))
	data := buf.Bytes()
	const ihdrEnd = 8 + 25
	return slices.Concat(data[:ihdrEnd], chunk, data[ihdrEnd:])
}

func TestExifOrientation(t *testing.T) {
	const bs = 8
	src := asymmetric(bs)
	at := func(m image.Image, bx, by int) color.NRGBA { // centre of block (bx, by)
		return color.NRGBAModel.Convert(m.At(bx*bs+bs/2, by*bs+bs/2)).(color.NRGBA)
	}
	// Where source block (sx, sy) of the 4×2 grid lands for each orientation,
	// and the block grid size afterwards.
	dest := func(o, sx, sy int) (int, int, int, int) {
		switch o {
		case 1:
			return sx, sy, 4, 2
		case 2:
			return 3 - sx, sy, 4, 2
		case 3:
			return 3 - sx, 1 - sy, 4, 2
		case 4:
			return sx, 1 - sy, 4, 2
		case 5:
			return sy, sx, 2, 4
		case 6: // 90° clockwise: the left column becomes the top row, read bottom-up
			return 1 - sy, sx, 2, 4
		case 7:
			return 1 - sy, 3 - sx, 2, 4
		default: // 8, 90° counter-clockwise
			return sy, 3 - sx, 2, 4
		}
	}
	near := func(a, b color.NRGBA) bool {
		d := func(x, y uint8) bool { return math.Abs(float64(x)-float64(y)) <= 24 }
		return d(a.R, b.R) && d(a.G, b.G) && d(a.B, b.B)
	}
	for o := 1; o <= 8; o++ {
		for _, format := range []string{"jpeg", "png"} {
			var data []byte
			if format == "jpeg" {
				data = jpegWithOrientation(t, src, o)
			} else {
				data = pngWithOrientation(t, src, o)
			}
			img, err := Decode(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("%s orientation %d: %v", format, o, err)
			}
			for sy := range 2 {
				for sx := range 4 {
					dx, dy, gw, gh := dest(o, sx, sy)
					if b := img.Bounds(); b.Dx() != gw*bs || b.Dy() != gh*bs {
						t.Fatalf("%s orientation %d: size %v, want %d×%d", format, o, b.Size(), gw*bs, gh*bs)
					}
					got, want := at(img, dx, dy), at(src, sx, sy)
					if (format == "png" && got != want) || !near(got, want) {
						t.Errorf("%s orientation %d: block (%d,%d) → (%d,%d) is %v, want %v", format, o, sx, sy, dx, dy, got, want)
					}
				}
			}
		}
	}
}

func TestDecodePNGTransparencySemantics(t *testing.T) {
	// Pillow composites only "RGBA" images; grey+alpha, an RGB colour key and a
	// palette tRNS entry all keep their colours (values printed by Pillow when
	// make_fixtures.py wrote these files).
	for name, want := range map[string][]uint8{
		"trns_la.png":      {10, 10, 10, 100, 100, 100, 200, 200, 200},
		"trns_rgb.png":     {10, 20, 30, 1, 2, 3, 200, 100, 50},
		"trns_palette.png": {10, 20, 30, 1, 2, 3, 200, 100, 50},
	} {
		if got := decodeFile(t, filepath.Join("testdata", "pillow", name)); !bytes.Equal(got.Pix, want) {
			t.Errorf("%s: %v, Pillow gives %v", name, got.Pix, want)
		}
	}

	// An RGBA PNG keeps its alpha and is composited onto white.
	n := image.NewNRGBA(image.Rect(0, 0, 2, 1))
	n.SetNRGBA(0, 0, color.NRGBA{0, 0, 0, 0})
	n.SetNRGBA(1, 0, color.NRGBA{0, 0, 0, 128})
	var buf bytes.Buffer
	if err := png.Encode(&buf, n); err != nil {
		t.Fatal(err)
	}
	img, err := Decode(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	rgb, err := FromImage(img)
	if err != nil {
		t.Fatal(err)
	}
	r, _, _ := overWhite(0, 0, 0, 128)
	if !bytes.Equal(rgb.Pix, []uint8{255, 255, 255, r, r, r}) || r != 127 {
		t.Fatalf("RGBA over white → %v (half black = %d)", rgb.Pix, r)
	}
}

// 16-bit PNGs as Pillow 9.4 reads them (values taken from Pillow): colour keeps
// the high byte, grey ("I" mode) clips to 255.
func TestDecode16Bit(t *testing.T) {
	g := image.NewGray16(image.Rect(0, 0, 4, 1))
	for i, v := range []uint16{0, 200, 1000, 65535} {
		g.SetGray16(i, 0, color.Gray16{Y: v})
	}
	c := image.NewRGBA64(image.Rect(0, 0, 2, 1))
	c.SetRGBA64(0, 0, color.RGBA64{0x1234, 0x80ff, 0xff00, 0xffff})
	c.SetRGBA64(1, 0, color.RGBA64{0x00ff, 0x0180, 0xfe7f, 0xffff})
	n := image.NewNRGBA64(image.Rect(0, 0, 2, 1))
	n.SetNRGBA64(0, 0, color.NRGBA64{0x1234, 0x80ff, 0xff00, 0x8000})
	n.SetNRGBA64(1, 0, color.NRGBA64{0x00ff, 0x0180, 0xfe7f, 0x80ff})
	for _, c := range []struct {
		img  image.Image
		want []uint8
	}{
		{g, []uint8{0, 0, 0, 200, 200, 200, 255, 255, 255, 255, 255, 255}},
		{c, []uint8{18, 128, 255, 0, 1, 254}},
		{n, []uint8{136, 191, 255, 127, 128, 254}},
	} {
		var buf bytes.Buffer
		if err := png.Encode(&buf, c.img); err != nil {
			t.Fatal(err)
		}
		img, err := Decode(&buf)
		if err != nil {
			t.Fatal(err)
		}
		rgb, err := FromImage(img)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(rgb.Pix, c.want) {
			t.Errorf("%T: %v, Pillow gives %v", c.img, rgb.Pix, c.want)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	for name, data := range map[string][]byte{
		"empty":     nil,
		"gif":       []byte("GIF89a...."),
		"png magic": []byte("\x89PNG\r\n\x1a\n"),
		"jpeg SOI":  {0xff, 0xd8, 0xff},
	} {
		if _, err := Decode(bytes.NewReader(data)); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
	// A PNG header claiming 100000×100000 pixels is refused before decoding.
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewGray(image.Rect(0, 0, 1, 1))); err != nil {
		t.Fatal(err)
	}
	data := slices.Clone(buf.Bytes())
	binary.BigEndian.PutUint32(data[16:], 100000)
	binary.BigEndian.PutUint32(data[20:], 100000)
	binary.BigEndian.PutUint32(data[29:], crc32.ChecksumIEEE(data[12:29]))
	if _, err := Decode(bytes.NewReader(data)); err == nil {
		t.Error("a 10-gigapixel PNG header was accepted")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(pngWithOrientation(f, asymmetric(2), 6))
	f.Add(jpegWithOrientation(f, asymmetric(2), 8))
	for _, name := range []string{"ycc420_orient6.jpg", "ycc422.jpg", "resize_4.png"} {
		b, err := os.ReadFile("testdata/pillow/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		img, err := Decode(bytes.NewReader(data))
		if err != nil {
			return
		}
		if _, err := FromImage(img); err != nil {
			t.Fatalf("decoded image not convertible: %v", err)
		}
	})
}

func BenchmarkPreprocess1280x720(b *testing.B) {
	src := RGB{W: 1280, H: 720, Pix: make([]uint8, 3*1280*720)}
	for i := range src.Pix {
		src.Pix[i] = uint8(i * 7)
	}
	p := Preprocessor{Width: 518, Patch: 14}
	var buf []float32
	b.SetBytes(int64(len(src.Pix)))
	for b.Loop() {
		var err error
		if buf, _, _, err = p.RunRGB(src, buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPreprocessPortraitPNG(b *testing.B) {
	src := decodeFile(b, sharedtest.Path(b, "golden", "preprocess", "portrait_360x640.png"))
	p := Preprocessor{Width: 518, Patch: 14}
	var buf []float32
	for b.Loop() {
		var err error
		if buf, _, _, err = p.RunRGB(src, buf); err != nil {
			b.Fatal(err)
		}
	}
}
