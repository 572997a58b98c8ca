package msgs

import (
	"encoding/binary"
	"math"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
)

// DecodeDepth reads a depth image as REP 118 defines it: 16UC1 (or mono16)
// in millimetres, or 32FC1 in metres, either byte order. It returns the
// depths in metres, row major, 0 or NaN where the sensor has none. Any other
// encoding, or a size that does not add up, is a *DecodeError.
func DecodeDepth(m *sensor_msgs.Image) (width, height int, metres []float32, err error) {
	if m == nil {
		return 0, 0, nil, decodeErr(KindFormat, "depth image message is nil")
	}
	var bpp uint64
	switch m.Encoding {
	case "16UC1", "mono16":
		bpp = 2
	case "32FC1":
		bpp = 4
	default:
		return 0, 0, nil, decodeErr(KindEncoding, "depth encoding %q is not supported (want 16UC1 in millimetres or 32FC1 in metres)", m.Encoding)
	}
	w, h := uint64(m.Width), uint64(m.Height)
	if w == 0 || h == 0 || w*h > MaxPixels {
		return 0, 0, nil, decodeErr(KindSize, "depth image is %dx%d", w, h)
	}
	if m.IsBigendian > 1 {
		return 0, 0, nil, decodeErr(KindFormat, "is_bigendian is %d; want 0 or 1", m.IsBigendian)
	}
	if uint64(m.Step) < w*bpp {
		return 0, 0, nil, decodeErr(KindStep, "step %d is shorter than a row of %d %s pixels", m.Step, w, m.Encoding)
	}
	if uint64(len(m.Data)) != uint64(m.Step)*h {
		return 0, 0, nil, decodeErr(KindSize, "data holds %d bytes but step %d × height %d = %d", len(m.Data), m.Step, h, uint64(m.Step)*h)
	}
	var order binary.ByteOrder = binary.LittleEndian
	if m.IsBigendian == 1 {
		order = binary.BigEndian
	}
	width, height = int(w), int(h)
	metres = make([]float32, width*height)
	for y := range height {
		row := m.Data[y*int(m.Step):]
		for x := range width {
			if bpp == 2 {
				metres[y*width+x] = float32(order.Uint16(row[2*x:])) / 1000
			} else {
				metres[y*width+x] = math.Float32frombits(order.Uint32(row[4*x:]))
			}
		}
	}
	return width, height, metres, nil
}
