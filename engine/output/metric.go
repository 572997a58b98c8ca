package output

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/lingbotmap/lingbotmap/engine/render"
)

// scaled is depth in metres at the metric scale s.
func scaled(depth []float32, s float64) []float32 {
	out := make([]float32, len(depth))
	for i, d := range depth {
		out[i] = float32(float64(d) * s)
	}
	return out
}

// depthUnits says which unit depth/ and depth_color/ are in: metric when
// the scale is known and every image was written at it; the frames written
// at a metric scale; run.json's words for it.
func (w *Folder) depthUnits() (metric bool, at []MetricFrames, unit string) {
	sc, known := w.frame.Scale()
	metric = known
	for _, f := range w.files {
		if f.Kind != DepthImage {
			continue
		}
		metric = metric && f.Metric == sc
		if f.Metric == 0 {
			continue
		}
		if n := len(at); n > 0 && at[n-1].Last+1 == f.Seq && at[n-1].Scale == f.Metric {
			at[n-1].Last = f.Seq
			continue
		}
		at = append(at, MetricFrames{First: f.Seq, Last: f.Seq, Scale: f.Metric})
	}
	ds := w.opt.DepthScale
	switch {
	case metric:
		unit = fmt.Sprintf("1/%g m (metric scale %g m per model unit)", ds, sc)
	case len(at) > 0:
		unit = fmt.Sprintf("1/%g m for the frames in metric_at, 1/%g of a model depth unit for the others, until the run's end rewrites them all in metres", ds, ds)
	default:
		unit = fmt.Sprintf("1/%g of a model depth unit (metric scale unknown; metres for metric models)", ds)
	}
	return metric, at, unit
}

// rescaleDepth rewrites the depth and depth preview images not written at
// the final metric scale (those from before it was known) at it, each
// atomically, from the depth PNG on disk, and updates their checksums and
// depth ranges; the next checkpoint makes them durable and saves the
// checksums. A pixel clipped at 65535 stays clipped.
func (w *Folder) rescaleDepth() error {
	sc, known := w.frame.Scale()
	if !known || !w.opt.SaveDepth {
		return nil
	}
	color := map[uint64]int{}
	for i, f := range w.files {
		if f.Kind == DepthColorImage {
			color[f.Seq] = i
		}
	}
	ranges := map[uint64]int{}
	for i, r := range w.ranges {
		ranges[r.seq] = i
	}
	for i := range w.files {
		f := w.files[i]
		if f.Kind != DepthImage || f.Metric == sc {
			continue
		}
		was := 1.0 // model units
		if f.Metric != 0 {
			was = f.Metric
		}
		depth, width, height, clipped, err := readDepthPNG(filepath.Join(w.opt.Dir, f.Name()), w.opt.DepthScale, sc/was)
		if err != nil {
			return fmt.Errorf("rewriting depth in metres: %w", err)
		}
		c, sum, err := writeGray16File(w.opt.Dir, FileSum{Kind: DepthImage, Seq: f.Seq, Metric: sc}, depth, width, height, w.opt.DepthScale)
		if err != nil {
			return fmt.Errorf("rewriting depth in metres: %w", err)
		}
		w.depth.Clipped += int64(c - clipped)
		w.files[i] = sum
		j, ok := color[f.Seq]
		if !ok {
			continue
		}
		img, dr, err := render.DepthPreview(depth, width, height)
		if err == nil {
			sum, err = writeSummed(w.opt.Dir, FileSum{Kind: DepthColorImage, Seq: f.Seq, Metric: sc}, func(f io.Writer) error { return render.EncodePNG(f, img) })
		}
		if err != nil {
			return fmt.Errorf("rewriting the depth preview in metres: %w", err)
		}
		w.files[j] = sum
		if k, ok := ranges[f.Seq]; ok {
			w.ranges[k].r = dr
		}
	}
	return nil
}

// readDepthPNG reads a depth PNG written with scale (units per depth unit)
// and returns its depths multiplied by mul; pixels at 65535 (clipped) come
// back too large to fit, so that they are clipped again; clipped counts
// them.
func readDepthPNG(path string, scale, mul float64) (depth []float32, width, height, clipped int, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, 0, 0, err
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		return nil, 0, 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	g, ok := img.(*image.Gray16)
	if !ok {
		return nil, 0, 0, 0, fmt.Errorf("%s: not a 16-bit grey PNG (%T)", path, img)
	}
	r := g.Bounds()
	width, height = r.Dx(), r.Dy()
	depth = make([]float32, width*height)
	for y := range height {
		for x := range width {
			v := g.Gray16At(r.Min.X+x, r.Min.Y+y).Y
			switch v {
			case 0:
			case 65535:
				depth[y*width+x] = math.MaxFloat32
				clipped++
			default:
				depth[y*width+x] = float32(float64(v) / scale * mul)
			}
		}
	}
	return depth, width, height, clipped, nil
}
