package render

import (
	"fmt"
	"image"
	"image/png"
	"io"
	"math"
)

// DepthScale is the default scale of depth PNGs: one unit per millimetre, the
// convention of the TUM RGB-D and most depth datasets (there 5000 per metre).
const DepthScale = 1000

// WriteGray16 writes values as a 16-bit greyscale PNG, each stored as
// round(value·scale). Values that are not finite or not positive become 0
// (0 means "no measurement"), values above 65535/scale are clipped to 65535.
// It returns how many values were clipped, so callers can warn.
func WriteGray16(w io.Writer, vals []float32, width, height int, scale float64) (int, error) {
	if width <= 0 || height <= 0 || len(vals) != width*height {
		return 0, fmt.Errorf("png: %d values do not make a %d×%d image", len(vals), width, height)
	}
	if !(scale > 0) || math.IsInf(scale, 0) {
		return 0, fmt.Errorf("png: scale must be a positive number, not %g", scale)
	}
	img := image.NewGray16(image.Rect(0, 0, width, height))
	clipped := 0
	for i, v := range vals {
		x := float64(v) * scale
		var q uint16
		switch {
		case !(x > 0) || math.IsInf(x, 0):
		case x >= 65535.5: // would round past the largest value
			q = 65535
			clipped++
		default:
			q = uint16(math.Round(x))
		}
		// Gray16 stores big-endian pairs.
		img.Pix[2*i] = uint8(q >> 8)
		img.Pix[2*i+1] = uint8(q)
	}
	if err := EncodePNG(w, img); err != nil {
		return clipped, fmt.Errorf("png: %w", err)
	}
	return clipped, nil
}

// EncodePNG writes img as a PNG at zlib's fastest level: per-frame images of
// a live run are written beside the model, where the default level's time
// per frame is the slowest step of the frame path, for files a few
// percent larger.
func EncodePNG(w io.Writer, img image.Image) error {
	e := png.Encoder{CompressionLevel: png.BestSpeed}
	return e.Encode(w, img)
}
