package preprocess

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/golden/goldentest"
	"github.com/lingbotmap/lingbotmap/internal/shared/sharedtest"
)

func decodeFile(t testing.TB, path string) RGB {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	rgb, err := FromImage(img)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return rgb
}

// goldenSources lists the 7 images of golden/preprocess in the order of
// files.txt: 3 courthouse frames, 2 oxford frames, then the two stored beside it.
func goldenSources(t *testing.T) []string {
	b, err := os.ReadFile(sharedtest.Path(t, "golden", "preprocess", "files.txt"))
	if err != nil {
		t.Fatal(err)
	}
	names := strings.Fields(string(b))
	if len(names) != 7 {
		t.Fatalf("files.txt lists %d images, want 7", len(names))
	}
	dirs := []string{"data/courthouse", "data/courthouse", "data/courthouse", "data/oxford", "data/oxford", "golden/preprocess", "golden/preprocess"}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = sharedtest.Path(t, append(strings.Split(dirs[i], "/"), n)...)
	}
	return out
}

// compare returns the largest absolute difference and how many values differ.
func compare(t *testing.T, what string, got, want []float32) (float64, int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	var maxErr float64
	n := 0
	for i := range got {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if d > 0 {
			n++
		}
		maxErr = max(maxErr, d)
	}
	return maxErr, n
}

func TestGoldenPreprocess518(t *testing.T) {
	st := goldentest.Open(t, "preprocess", "preprocess_518.safetensors")
	for i, path := range goldenSources(t) {
		name := fmt.Sprintf("img%d", i)
		t.Run(name+"_"+filepath.Base(path), func(t *testing.T) {
			info, ok := st.Info(name)
			if !ok || len(info.Shape) != 3 || info.Shape[0] != 3 {
				t.Fatalf("golden tensor %s missing or not [3,H,W]: %+v", name, info)
			}
			want, err := st.Float32(name)
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			img, err := Decode(f)
			if err != nil {
				t.Fatal(err)
			}
			got, w, h, err := Preprocess(img, 518, 14)
			if err != nil {
				t.Fatal(err)
			}
			if h != info.Shape[1] || w != info.Shape[2] {
				t.Fatalf("size %d×%d, want %d×%d", w, h, info.Shape[2], info.Shape[1])
			}
			maxErr, n := compare(t, name, got, want)
			t.Logf("%s → %d×%d: max error %.3g (%.2f/255), %d of %d values differ", filepath.Base(path), w, h, maxErr, maxErr*255, n, len(got))
			// The resampler reproduces Pillow's integer arithmetic: exact, not "within 1/255".
			if maxErr != 0 {
				t.Errorf("%d values differ from the reference (max error %.4g)", n, maxErr)
			}
		})
	}
}

func TestGoldenTinyImages(t *testing.T) {
	st := goldentest.Open(t, "images_kf1", "inputs.safetensors")
	info, _ := st.Info("images")
	if len(info.Shape) != 4 || info.Shape[0] != 16 || info.Shape[1] != 3 || info.Shape[2] != 42 || info.Shape[3] != 70 {
		t.Fatalf("golden images shape %v, want [16 3 42 70]", info.Shape)
	}
	want, err := st.Float32("images")
	if err != nil {
		t.Fatal(err)
	}
	// The 16 first frames of the courthouse folder, sorted, as the reference globbed them.
	paths, err := filepath.Glob(sharedtest.Path(t, "data", "courthouse", "*.png"))
	if err != nil || len(paths) < 16 {
		t.Fatalf("want 16 courthouse frames, found %d (%v)", len(paths), err)
	}
	p := Preprocessor{Width: 70, Patch: 14}
	var buf []float32
	per := 3 * 42 * 70
	var worst float64
	total := 0
	for i, path := range paths[:16] {
		chw, w, h, err := p.Run(decodeFile(t, path), buf)
		if err != nil {
			t.Fatal(err)
		}
		buf = chw
		if w != 70 || h != 42 {
			t.Fatalf("%s: %d×%d, want 70×42", path, w, h)
		}
		maxErr, n := compare(t, path, chw, want[i*per:(i+1)*per])
		worst = max(worst, maxErr)
		total += n
	}
	t.Logf("16 frames → 70×42: max error %.3g (%.2f/255), %d of %d values differ", worst, worst*255, total, len(want))
	if worst != 0 {
		t.Errorf("%d values differ from the reference (max error %.4g)", total, worst)
	}
}
