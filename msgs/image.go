package msgs

import (
	"encoding/binary"
	"fmt"
	"image"
	"math"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"
)

// MaxPixels bounds width·height of any image this package decodes, so that a
// malformed header cannot make us allocate gigabytes (8192×8192).
const MaxPixels = 1 << 26

// pixelLayout says where red, green, blue and alpha sit inside one pixel of a
// raw sensor_msgs/Image encoding.
type pixelLayout struct {
	channels int // samples per pixel
	depth    int // bytes per sample: 1 or 2
	r, g, b  int // channel index of each colour (all equal for mono)
	a        int // channel index of alpha, or -1
}

// layoutOf maps a ROS image encoding (sensor_msgs/image_encodings.h) to its
// layout. Only the colour and mono encodings a camera sends are accepted.
func layoutOf(encoding string) (pixelLayout, bool) {
	switch encoding {
	case "rgb8":
		return pixelLayout{3, 1, 0, 1, 2, -1}, true
	case "bgr8":
		return pixelLayout{3, 1, 2, 1, 0, -1}, true
	case "rgba8":
		return pixelLayout{4, 1, 0, 1, 2, 3}, true
	case "bgra8":
		return pixelLayout{4, 1, 2, 1, 0, 3}, true
	case "mono8":
		return pixelLayout{1, 1, 0, 0, 0, -1}, true
	case "rgb16":
		return pixelLayout{3, 2, 0, 1, 2, -1}, true
	case "bgr16":
		return pixelLayout{3, 2, 2, 1, 0, -1}, true
	case "rgba16":
		return pixelLayout{4, 2, 0, 1, 2, 3}, true
	case "bgra16":
		return pixelLayout{4, 2, 2, 1, 0, 3}, true
	case "mono16":
		return pixelLayout{1, 2, 0, 0, 0, -1}, true
	}
	return pixelLayout{}, false
}

// DecodeImage converts a raw sensor_msgs/Image to RGBA. Supported encodings:
// rgb8, bgr8, rgba8, bgra8, mono8 and their 16-bit forms (rgb16, bgr16,
// rgba16, bgra16, mono16, reduced to their high byte, honouring
// is_bigendian). Pixels with alpha are stored premultiplied, as image.RGBA
// defines; compositing over a background is left to the caller.
//
// The message must satisfy step ≥ width·bytes-per-pixel,
// len(data) == step·height and is_bigendian ∈ {0, 1}; anything else is a
// *DecodeError.
func DecodeImage(m *sensor_msgs.Image) (*image.RGBA, error) {
	if m == nil {
		return nil, decodeErr(KindFormat, "image message is nil")
	}
	lay, ok := layoutOf(m.Encoding)
	if !ok {
		return nil, decodeErr(KindEncoding, "image encoding %q is not supported (want rgb8, bgr8, rgba8, bgra8, mono8 or a 16-bit form)", m.Encoding)
	}
	w, h := uint64(m.Width), uint64(m.Height)
	if w == 0 || h == 0 {
		return nil, decodeErr(KindSize, "image is %dx%d: width and height must be positive", w, h)
	}
	if w*h > MaxPixels {
		return nil, decodeErr(KindSize, "image is %dx%d, more than the %d pixels allowed", w, h, MaxPixels)
	}
	if m.IsBigendian > 1 {
		return nil, decodeErr(KindFormat, "is_bigendian is %d; want 0 or 1", m.IsBigendian)
	}
	pixBytes := uint64(lay.channels * lay.depth)
	if uint64(m.Step) < w*pixBytes {
		return nil, decodeErr(KindStep, "step %d is shorter than a row of %d %s pixels (%d bytes)", m.Step, w, m.Encoding, w*pixBytes)
	}
	if uint64(len(m.Data)) != uint64(m.Step)*h {
		return nil, decodeErr(KindSize, "data holds %d bytes but step %d × height %d = %d", len(m.Data), m.Step, h, uint64(m.Step)*h)
	}

	// For 16-bit samples keep the most significant byte.
	hi := 0
	if lay.depth == 2 && m.IsBigendian == 0 {
		hi = 1
	}
	width, height, step := int(w), int(h), int(m.Step)
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	for y := range height {
		row := m.Data[y*step : y*step+width*int(pixBytes)]
		out := img.Pix[y*img.Stride : y*img.Stride+4*width]
		for x := range width {
			px := row[x*int(pixBytes):]
			r := px[lay.r*lay.depth+hi]
			g := px[lay.g*lay.depth+hi]
			b := px[lay.b*lay.depth+hi]
			a := uint8(255)
			if lay.a >= 0 {
				a = px[lay.a*lay.depth+hi]
				r, g, b = premul(r, a), premul(g, a), premul(b, a)
			}
			o := out[4*x : 4*x+4]
			o[0], o[1], o[2], o[3] = r, g, b, a
		}
	}
	return img, nil
}

// PrecisionLoss says what DecodeImage drops of an image with this encoding:
// the 16-bit encodings (mono16, rgb16, ...) keep only the high byte of each
// sample. ok is false for the 8-bit encodings, which keep every bit. The
// package does not log: callers say it once per stream.
func PrecisionLoss(encoding string) (loss string, ok bool) {
	lay, known := layoutOf(encoding)
	if !known || lay.depth == 1 {
		return "", false
	}
	return fmt.Sprintf("%s images are reduced to 8 bits per sample (the high byte of each 16-bit sample is kept)", encoding), true
}

func premul(c, a uint8) uint8 { return uint8((uint32(c)*uint32(a) + 127) / 255) }

// DepthImage builds a 32FC1 sensor_msgs/Image (little endian, metres) from a
// row-major depth map. Missing values (depth shorter than width·height) are
// written as NaN, which REP 118 defines as "no measurement"; extra values are
// ignored. Non-positive sizes give an empty image.
func DepthImage(h std_msgs.Header, width, height int, depth []float32) *sensor_msgs.Image {
	width, height = max(width, 0), max(height, 0)
	if width == 0 || height == 0 {
		width, height = 0, 0
	}
	n := width * height
	data := make([]byte, 4*n)
	nan := math.Float32bits(float32(math.NaN()))
	for i := range n {
		bits := nan
		if i < len(depth) {
			bits = math.Float32bits(depth[i])
		}
		binary.LittleEndian.PutUint32(data[4*i:], bits)
	}
	return &sensor_msgs.Image{
		Header:   h,
		Height:   uint32(height),
		Width:    uint32(width),
		Encoding: "32FC1",
		Step:     uint32(4 * width),
		Data:     data,
	}
}
