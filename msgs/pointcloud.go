package msgs

import (
	"encoding/binary"
	"math"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"
)

// PointXYZRGB is one coloured point, in metres, in the header's frame.
type PointXYZRGB struct {
	X, Y, Z float32
	R, G, B uint8
}

// pointStep is the size of one point in the clouds we publish: x, y, z as
// float32 and the colour packed into a fourth 32-bit word, the layout PCL's
// PointXYZRGB and rviz's RGB8 colour transformer expect.
const pointStep = 16

// PointCloud2 packs points into an unorganised (height 1), little-endian
// sensor_msgs/PointCloud2 with fields x, y, z (float32) and rgb (a float32
// whose bits are the uint32 r<<16 | g<<8 | b). is_dense is true unless a
// coordinate is NaN or infinite.
func PointCloud2(h std_msgs.Header, pts []PointXYZRGB) *sensor_msgs.PointCloud2 {
	data := make([]byte, pointStep*len(pts))
	dense := true
	for i, p := range pts {
		if !finite(p.X) || !finite(p.Y) || !finite(p.Z) {
			dense = false
		}
		o := data[pointStep*i:]
		binary.LittleEndian.PutUint32(o[0:], math.Float32bits(p.X))
		binary.LittleEndian.PutUint32(o[4:], math.Float32bits(p.Y))
		binary.LittleEndian.PutUint32(o[8:], math.Float32bits(p.Z))
		binary.LittleEndian.PutUint32(o[12:], uint32(p.R)<<16|uint32(p.G)<<8|uint32(p.B))
	}
	return &sensor_msgs.PointCloud2{
		Header: h,
		Height: 1,
		Width:  uint32(len(pts)),
		Fields: []sensor_msgs.PointField{
			{Name: "x", Offset: 0, Datatype: sensor_msgs.PointField_FLOAT32, Count: 1},
			{Name: "y", Offset: 4, Datatype: sensor_msgs.PointField_FLOAT32, Count: 1},
			{Name: "z", Offset: 8, Datatype: sensor_msgs.PointField_FLOAT32, Count: 1},
			{Name: "rgb", Offset: 12, Datatype: sensor_msgs.PointField_FLOAT32, Count: 1},
		},
		IsBigendian: false,
		PointStep:   pointStep,
		RowStep:     pointStep * uint32(len(pts)),
		Data:        data,
		IsDense:     dense,
	}
}

func finite(v float32) bool { return !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) }

// ParsePointCloud2 unpacks any PointCloud2 that has float32 x, y, z fields and
// optionally an rgb or rgba field (float32 or uint32 holding packed 8-bit
// colour). Other fields are ignored; without a colour field the points are
// black. Sizes, offsets and strides are checked against the data, so any
// input gives either points or a *DecodeError.
func ParsePointCloud2(pc *sensor_msgs.PointCloud2) ([]PointXYZRGB, error) {
	if pc == nil {
		return nil, decodeErr(KindFormat, "point cloud message is nil")
	}
	step := uint64(pc.PointStep)
	offsets := map[string]uint64{}
	for _, f := range pc.Fields {
		for _, name := range []string{"x", "y", "z", "rgb", "rgba"} {
			if f.Name != name {
				continue
			}
			if _, dup := offsets[name]; dup {
				return nil, decodeErr(KindFormat, "point cloud has the field %q twice", name)
			}
			color := name == "rgb" || name == "rgba"
			if f.Datatype != sensor_msgs.PointField_FLOAT32 && !(color && f.Datatype == sensor_msgs.PointField_UINT32) {
				return nil, decodeErr(KindFormat, "point cloud field %q has datatype %d; want FLOAT32 (7)", name, f.Datatype)
			}
			if f.Count != 1 {
				return nil, decodeErr(KindFormat, "point cloud field %q has count %d; want 1", name, f.Count)
			}
			if uint64(f.Offset)+4 > step {
				return nil, decodeErr(KindFormat, "point cloud field %q at offset %d does not fit in point_step %d", name, f.Offset, step)
			}
			offsets[name] = uint64(f.Offset)
		}
	}
	for _, name := range []string{"x", "y", "z"} {
		if _, ok := offsets[name]; !ok {
			return nil, decodeErr(KindFormat, "point cloud has no float32 %q field", name)
		}
	}
	colorOff, hasColor := offsets["rgb"]
	if !hasColor {
		colorOff, hasColor = offsets["rgba"]
	}

	w, h := uint64(pc.Width), uint64(pc.Height)
	if w == 0 || h == 0 {
		return []PointXYZRGB{}, nil
	}
	if uint64(pc.RowStep) < w*step {
		return nil, decodeErr(KindStep, "row_step %d is shorter than width %d × point_step %d", pc.RowStep, w, step)
	}
	if uint64(len(pc.Data)) < uint64(pc.RowStep)*h {
		return nil, decodeErr(KindSize, "data holds %d bytes but row_step %d × height %d = %d", len(pc.Data), pc.RowStep, h, uint64(pc.RowStep)*h)
	}

	var order binary.ByteOrder = binary.LittleEndian
	if pc.IsBigendian {
		order = binary.BigEndian
	}
	f32 := func(b []byte) float32 { return math.Float32frombits(order.Uint32(b)) }
	ox, oy, oz := offsets["x"], offsets["y"], offsets["z"]
	pts := make([]PointXYZRGB, 0, w*h)
	for row := range h {
		rowData := pc.Data[row*uint64(pc.RowStep):]
		for col := range w {
			p := rowData[col*step : (col+1)*step]
			pt := PointXYZRGB{X: f32(p[ox:]), Y: f32(p[oy:]), Z: f32(p[oz:])}
			if hasColor {
				c := order.Uint32(p[colorOff:])
				pt.R, pt.G, pt.B = uint8(c>>16), uint8(c>>8), uint8(c)
			}
			pts = append(pts, pt)
		}
	}
	return pts, nil
}
