package msgs

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"
)

func TestPointCloud2Layout(t *testing.T) {
	hdr := std_msgs.Header{Seq: 9, FrameId: "map"}
	pts := []PointXYZRGB{{1.5, -2, 3.25, 255, 128, 1}, {0, 0, -0.5, 0, 0, 0}, {1e3, 2e-3, 7, 10, 20, 30}}
	pc := PointCloud2(hdr, pts)
	if pc.Height != 1 || pc.Width != 3 || pc.PointStep != 16 || pc.RowStep != 48 || !pc.IsDense || pc.IsBigendian || len(pc.Data) != 48 {
		t.Fatalf("unexpected cloud layout %+v", pc)
	}
	// The wire layout rviz and PCL expect: little-endian float32 x y z, then 0x00RRGGBB.
	if got := binary.LittleEndian.Uint32(pc.Data[12:]); got != 0xFF8001 {
		t.Errorf("packed rgb of point 0 = %#x, want 0xff8001", got)
	}
	if got := math.Float32frombits(binary.LittleEndian.Uint32(pc.Data[16+8:])); got != -0.5 {
		t.Errorf("z of point 1 = %v, want -0.5", got)
	}
	back, err := ParsePointCloud2(pc)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(pts) {
		t.Fatalf("parsed %d points, want %d", len(back), len(pts))
	}
	for i := range pts {
		if back[i] != pts[i] {
			t.Errorf("point %d = %+v, want %+v", i, back[i], pts[i])
		}
	}
	if PointCloud2(hdr, []PointXYZRGB{{X: float32(math.NaN())}}).IsDense {
		t.Error("a cloud with a NaN point claims to be dense")
	}
	if empty, err := ParsePointCloud2(PointCloud2(hdr, nil)); err != nil || len(empty) != 0 {
		t.Errorf("empty cloud: %v points, err %v", len(empty), err)
	}
}

// A big-endian organised cloud with extra fields, padding and a uint32 rgba
// field, as other drivers publish them, parses too.
func TestParsePointCloud2Foreign(t *testing.T) {
	const w, h, step, rowStep = 2, 2, 24, 56
	pc := &sensor_msgs.PointCloud2{
		Height: h, Width: w, PointStep: step, RowStep: rowStep, IsBigendian: true,
		Fields: []sensor_msgs.PointField{
			{Name: "intensity", Offset: 0, Datatype: sensor_msgs.PointField_FLOAT64, Count: 1},
			{Name: "z", Offset: 8, Datatype: sensor_msgs.PointField_FLOAT32, Count: 1},
			{Name: "y", Offset: 12, Datatype: sensor_msgs.PointField_FLOAT32, Count: 1},
			{Name: "x", Offset: 16, Datatype: sensor_msgs.PointField_FLOAT32, Count: 1},
			{Name: "rgba", Offset: 20, Datatype: sensor_msgs.PointField_UINT32, Count: 1},
		},
		Data: make([]byte, rowStep*h),
	}
	var want []PointXYZRGB
	for r := range h {
		for c := range w {
			p := PointXYZRGB{float32(c), float32(r), float32(r*w + c), uint8(c * 50), uint8(r * 60), 7}
			want = append(want, p)
			o := pc.Data[r*rowStep+c*step:]
			binary.BigEndian.PutUint32(o[8:], math.Float32bits(p.Z))
			binary.BigEndian.PutUint32(o[12:], math.Float32bits(p.Y))
			binary.BigEndian.PutUint32(o[16:], math.Float32bits(p.X))
			binary.BigEndian.PutUint32(o[20:], 0xAA000000|uint32(p.R)<<16|uint32(p.G)<<8|uint32(p.B))
		}
	}
	got, err := ParsePointCloud2(pc)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("point %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestParsePointCloud2Errors(t *testing.T) {
	good := func() *sensor_msgs.PointCloud2 {
		return PointCloud2(std_msgs.Header{}, []PointXYZRGB{{1, 2, 3, 4, 5, 6}, {7, 8, 9, 1, 2, 3}})
	}
	cases := []struct {
		name string
		edit func(pc *sensor_msgs.PointCloud2)
		kind string
	}{
		{"no z", func(pc *sensor_msgs.PointCloud2) { pc.Fields = pc.Fields[:2] }, KindFormat},
		{"x as float64", func(pc *sensor_msgs.PointCloud2) { pc.Fields[0].Datatype = sensor_msgs.PointField_FLOAT64 }, KindFormat},
		{"count 3", func(pc *sensor_msgs.PointCloud2) { pc.Fields[1].Count = 3 }, KindFormat},
		{"offset past point", func(pc *sensor_msgs.PointCloud2) { pc.Fields[3].Offset = 13 }, KindFormat},
		{"duplicate field", func(pc *sensor_msgs.PointCloud2) { pc.Fields = append(pc.Fields, pc.Fields[0]) }, KindFormat},
		{"row step short", func(pc *sensor_msgs.PointCloud2) { pc.RowStep = 31 }, KindStep},
		{"data short", func(pc *sensor_msgs.PointCloud2) { pc.Data = pc.Data[:31] }, KindSize},
		{"width lies", func(pc *sensor_msgs.PointCloud2) { pc.Width, pc.RowStep = 1<<31, 1<<31 }, KindStep},
		{"height lies", func(pc *sensor_msgs.PointCloud2) { pc.Height = 1 << 30 }, KindSize},
	}
	for _, c := range cases {
		pc := good()
		c.edit(pc)
		_, err := ParsePointCloud2(pc)
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Fatalf("%s: got %v, want a *DecodeError", c.name, err)
		}
		if de.Kind != c.kind {
			t.Errorf("%s: kind %q (%v), want %q", c.name, de.Kind, err, c.kind)
		}
	}
}
