package cdr

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/diagnostic_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/nav_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/tf2_msgs"

	"github.com/lingbotmap/lingbotmap/msgs"
)

var stamp = time.Unix(1700000000, 123456789)

func header(frame string) std_msgs.Header { return std_msgs.Header{Stamp: stamp, FrameId: frame} }

func pose(i float64) geometry_msgs.Pose {
	return geometry_msgs.Pose{
		Position:    geometry_msgs.Point{X: i, Y: -2 * i, Z: 0.5},
		Orientation: geometry_msgs.Quaternion{X: 0.1, Y: 0.2, Z: 0.3, W: math.Sqrt(1 - 0.14)},
	}
}

func tfStamped(child string) geometry_msgs.TransformStamped {
	return geometry_msgs.TransformStamped{Header: header("map"), ChildFrameId: child,
		Transform: geometry_msgs.Transform{Translation: geometry_msgs.Vector3{X: 1, Y: 2, Z: 3},
			Rotation: geometry_msgs.Quaternion{W: 1}}}
}

// samples holds one filled-in value of every message type the package knows.
func samples() []any {
	var cov [36]float64
	for i := range cov {
		cov[i] = float64(i) / 7
	}
	var gid Gid
	for i := range 16 {
		gid.Data[i] = uint8(0xa0 + i)
	}
	return []any{
		&geometry_msgs.PoseStamped{Header: header("camera"), Pose: pose(1)},
		&sensor_msgs.Image{Header: header("cam"), Height: 2, Width: 3, Encoding: "rgb8", Step: 9,
			Data: []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18}},
		&sensor_msgs.CompressedImage{Header: header("cam"), Format: "jpeg", Data: []byte{0xff, 0xd8, 0xff, 0xe0}},
		&sensor_msgs.CameraInfo{Header: header("cam"), Height: 294, Width: 518, DistortionModel: "plumb_bob",
			D: []float64{0.1, -0.2, 0, 0, 0.01}, K: [9]float64{500, 0, 259, 0, 500, 147, 0, 0, 1},
			R: [9]float64{1, 0, 0, 0, 1, 0, 0, 0, 1}, P: [12]float64{500, 0, 259, 0, 0, 500, 147, 0, 0, 0, 1, 0},
			BinningX: 1, BinningY: 2, Roi: sensor_msgs.RegionOfInterest{XOffset: 4, YOffset: 5, Height: 6, Width: 7, DoRectify: true}},
		&sensor_msgs.PointCloud2{Header: header("map"), Height: 1, Width: 2,
			Fields:      []sensor_msgs.PointField{{Name: "x", Offset: 0, Datatype: 7, Count: 1}, {Name: "rgb", Offset: 12, Datatype: 7, Count: 1}},
			IsBigendian: false, PointStep: 16, RowStep: 32, Data: bytes.Repeat([]byte{1, 2, 3, 4}, 8), IsDense: true},
		&geometry_msgs.TransformStamped{Header: header("map"), ChildFrameId: "camera", Transform: tfStamped("x").Transform},
		&tf2_msgs.TFMessage{Transforms: []geometry_msgs.TransformStamped{tfStamped("a"), tfStamped("camera_optical")}},
		&nav_msgs.Path{Header: header("map"), Poses: []geometry_msgs.PoseStamped{
			{Header: header("map"), Pose: pose(1)}, {Header: header("map"), Pose: pose(2)}}},
		&nav_msgs.Odometry{Header: header("map"), ChildFrameId: "camera",
			Pose: geometry_msgs.PoseWithCovariance{Pose: pose(3), Covariance: cov},
			Twist: geometry_msgs.TwistWithCovariance{Twist: geometry_msgs.Twist{
				Linear: geometry_msgs.Vector3{X: 1}, Angular: geometry_msgs.Vector3{Z: -1}}, Covariance: cov}},
		&diagnostic_msgs.DiagnosticArray{Header: header(""), Status: []diagnostic_msgs.DiagnosticStatus{
			{Level: 1, Name: "lingbotmap: model", Message: "slow", HardwareId: "cpu",
				Values: []diagnostic_msgs.KeyValue{{Key: "ms", Value: "12.5"}, {Key: "queue", Value: "0"}}},
			{Level: 3, Name: "stale"}}},
		&TriggerRequest{},
		&TriggerResponse{Success: true, Message: "saved map.ply"},
		&ParticipantEntitiesInfo{Gid: gid, NodeEntitiesInfoSeq: []NodeEntitiesInfo{
			{NodeNamespace: "/", NodeName: "lingbotmap", ReaderGidSeq: []Gid{gid}, WriterGidSeq: []Gid{gid, {}}}}},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, m := range samples() {
		data, err := Marshal(m)
		if err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		if !bytes.Equal(data[:4], []byte{0, 1, 0, 0}) {
			t.Fatalf("%T: header % x", m, data[:4])
		}
		got := reflect.New(reflect.TypeOf(m).Elem()).Interface()
		if err := Unmarshal(data, got); err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("%T: decoded\n%+v\nwant\n%+v", m, got, m)
		}
	}
}

// The bytes of a PoseStamped, written out by hand from the XCDR1 rules:
// frame_id "camera" ends at byte 19, so the doubles start after 5 bytes of
// padding, at the next multiple of 8.
func TestPoseStampedBytes(t *testing.T) {
	m := &geometry_msgs.PoseStamped{
		Header: std_msgs.Header{Seq: 99, Stamp: time.Unix(1700000000, 5), FrameId: "camera"},
		Pose: geometry_msgs.Pose{Position: geometry_msgs.Point{X: 1, Y: 2, Z: 3},
			Orientation: geometry_msgs.Quaternion{W: 1}},
	}
	want := []byte{
		0x00, 0x01, 0x00, 0x00, // encapsulation: CDR little endian
		0x00, 0xf1, 0x53, 0x65, // stamp.sec = 1700000000
		0x05, 0x00, 0x00, 0x00, // stamp.nanosec = 5
		0x07, 0x00, 0x00, 0x00, // frame_id length, with its NUL
		'c', 'a', 'm', 'e', 'r', 'a', 0x00,
		0x00, 0x00, 0x00, 0x00, 0x00, // padding to 8
		0, 0, 0, 0, 0, 0, 0xf0, 0x3f, // position.x = 1
		0, 0, 0, 0, 0, 0, 0x00, 0x40, // position.y = 2
		0, 0, 0, 0, 0, 0, 0x08, 0x40, // position.z = 3
		0, 0, 0, 0, 0, 0, 0, 0, // orientation.x
		0, 0, 0, 0, 0, 0, 0, 0, // orientation.y
		0, 0, 0, 0, 0, 0, 0, 0, // orientation.z
		0, 0, 0, 0, 0, 0, 0xf0, 0x3f, // orientation.w = 1
	}
	got, err := Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Marshal:\n% x\nwant\n% x", got, want)
	}

	// The same message from a big-endian writer decodes to the same value.
	be := []byte{0x00, 0x00, 0x00, 0x00, 0x65, 0x53, 0xf1, 0x00, 0, 0, 0, 5, 0, 0, 0, 7, 'c', 'a', 'm', 'e', 'r', 'a', 0, 0, 0, 0, 0, 0}
	for _, v := range []float64{1, 2, 3, 0, 0, 0, 1} {
		be = binary.BigEndian.AppendUint64(be, math.Float64bits(v))
	}
	for _, data := range [][]byte{want, be} {
		var back geometry_msgs.PoseStamped
		back.Header.Seq = 7 // ROS 2 has no seq: decoding clears it
		if err := Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		m.Header.Seq = 0
		if !reflect.DeepEqual(&back, m) {
			t.Fatalf("decoded %+v, want %+v", back, *m)
		}
	}
}

// An Image's data is a uint8 sequence: count, then the bytes, no padding.
func TestImageLayout(t *testing.T) {
	m := &sensor_msgs.Image{Header: std_msgs.Header{FrameId: "c"}, Height: 1, Width: 2, Encoding: "mono8", Step: 2, Data: []byte{7, 9}}
	got, err := Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{0, 1, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 0, // zero stamp
		2, 0, 0, 0, 'c', 0, 0, 0, // frame_id + padding
		1, 0, 0, 0, 2, 0, 0, 0, // height, width
		6, 0, 0, 0, 'm', 'o', 'n', 'o', '8', 0, // encoding
		0,          // is_bigendian
		0,          // padding
		2, 0, 0, 0, // step
		2, 0, 0, 0, 7, 9, // data
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Marshal:\n% x\nwant\n% x", got, want)
	}
}

func requireCDRError(t *testing.T, err error, wantIn string) {
	t.Helper()
	var de *msgs.DecodeError
	if !errors.As(err, &de) || de.Kind != msgs.KindCDR {
		t.Fatalf("error %v is not a *msgs.DecodeError of kind cdr", err)
	}
	if !strings.Contains(err.Error(), wantIn) {
		t.Fatalf("error %q does not mention %q", err, wantIn)
	}
}

func TestMalformed(t *testing.T) {
	img, err := Marshal(&sensor_msgs.Image{Header: header("cam"), Height: 1, Width: 1, Encoding: "mono8", Step: 1, Data: []byte{5}})
	if err != nil {
		t.Fatal(err)
	}
	dataCount := len(img) - 5 // the data sequence's count sits before its single byte
	set := func(off int, v uint32) []byte {
		b := bytes.Clone(img)
		binary.LittleEndian.PutUint32(b[off:], v)
		return b
	}
	for _, c := range []struct {
		name   string
		data   []byte
		wantIn string
	}{
		{"empty", nil, "encapsulation header"},
		{"header only", img[:4], "sensor_msgs/msg/Image.header.stamp.sec"},
		{"XCDR2", append([]byte{0, 7, 0, 0}, img[4:]...), "not plain CDR"},
		{"truncated string", img[:18], "header.frame_id"},
		{"string past the end", set(12, 1<<30), "runs past the end"},
		{"string without NUL", func() []byte { b := bytes.Clone(img); b[19] = 'x'; return b }(), "NUL"},
		{"huge count", set(dataCount, 0xFFFFFFFF), "Image.data: sequence of 4294967295 elements"},
		{"count one too many", set(dataCount, 2), "does not fit"},
		{"truncated data", img[:len(img)-1], "Image.data"},
		{"nanosec", set(8, 1_000_000_000), "nanosec"},
	} {
		var m sensor_msgs.Image
		requireCDRError(t, Unmarshal(c.data, &m), c.wantIn)
		_ = c.name
	}

	// A count of 2^31 PoseStamped elements of a Path must be refused
	// before anything is allocated for them.
	path := []byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80}
	allocs := testing.AllocsPerRun(10, func() {
		var p nav_msgs.Path
		if Unmarshal(path, &p) == nil {
			t.Fatal("forged Path count accepted")
		}
	})
	if allocs > 20 {
		t.Fatalf("refusing a forged count took %v allocations", allocs)
	}

	var b TriggerResponse
	requireCDRError(t, Unmarshal([]byte{0, 1, 0, 0, 2}, &b), "bool is 2")
	var p ParticipantEntitiesInfo
	long := make([]byte, 0, 400)
	long = append(long, 0, 1, 0, 0)
	long = append(long, make([]byte, GidSizeIron)...)
	long = binary.LittleEndian.AppendUint32(long, 1)
	long = binary.LittleEndian.AppendUint32(long, 300)
	long = append(long, bytes.Repeat([]byte{'n'}, 299)...)
	long = append(long, 0)
	requireCDRError(t, Unmarshal(long, &p), "bound of 256")
}

func TestMarshalErrors(t *testing.T) {
	for _, c := range []struct {
		msg    any
		wantIn string
	}{
		{&geometry_msgs.PoseStamped{Header: std_msgs.Header{Stamp: time.Unix(1<<33, 0)}}, "range"},
		{&geometry_msgs.PoseStamped{Header: std_msgs.Header{FrameId: "a\x00b"}}, "NUL"},
		{&NodeEntitiesInfo{NodeName: strings.Repeat("x", 257)}, "bound of 256"},
		{&std_msgs.String{Data: "not a known type"}, "not a ROS 2 message type"},
		{(*geometry_msgs.PoseStamped)(nil), "nil"},
		{nil, "not a ROS 2 message type"},
	} {
		_, err := Marshal(c.msg)
		if err == nil || !strings.Contains(err.Error(), c.wantIn) {
			t.Errorf("Marshal(%T): error %v, want one mentioning %q", c.msg, err, c.wantIn)
		}
	}
	if err := Unmarshal([]byte{0, 1, 0, 0}, geometry_msgs.PoseStamped{}); err == nil {
		t.Error("Unmarshal into a non-pointer succeeded")
	}
}

// ros_discovery_info in both Gid layouts: each decodes to the same message
// with its own size, whatever the reader prefers; the bytes of each layout
// are checked by hand; a sample neither layout reads is an error that names
// both attempts.
func TestDiscoveryGidSizes(t *testing.T) {
	var g, w Gid
	for i := range g.Data {
		g.Data[i], w.Data[i] = uint8(0x10+i), uint8(0x80+i)
	}
	for _, info := range []*ParticipantEntitiesInfo{
		{Gid: g},
		{Gid: g, NodeEntitiesInfoSeq: []NodeEntitiesInfo{{NodeNamespace: "/", NodeName: "lingbotmap", ReaderGidSeq: []Gid{w}, WriterGidSeq: []Gid{w, g}}}},
		{Gid: g, NodeEntitiesInfoSeq: []NodeEntitiesInfo{{NodeNamespace: "/a", NodeName: "b"}, {NodeNamespace: "/", NodeName: "cc", WriterGidSeq: []Gid{w}}}},
	} {
		for _, size := range []int{GidSizeIron, GidSizeHumble} {
			data, err := MarshalDiscovery(info, size)
			if err != nil {
				t.Fatal(err)
			}
			// The participant's Gid: the GUID, then zeros up to the size.
			if !bytes.Equal(data[4:20], g.Data[:]) || !bytes.Equal(data[20:4+size], make([]byte, size-16)) {
				t.Fatalf("%d-byte layout starts % x", size, data[:4+size])
			}
			if n := binary.LittleEndian.Uint32(data[4+size:]); int(n) != len(info.NodeEntitiesInfoSeq) {
				t.Fatalf("%d-byte layout: node count %d at byte %d", size, n, 4+size)
			}
			if size == GidSizeIron {
				generic, err := Marshal(info)
				if err != nil || !bytes.Equal(generic, data) {
					t.Fatalf("Marshal and MarshalDiscovery(16) differ: % x vs % x (%v)", generic, data, err)
				}
			}
			// Cyclone and Fast DDS pad a sample to 4 bytes.
			padded := append(append([]byte{}, data...), make([]byte, (4-len(data)%4)%4)...)
			for _, prefer := range []int{GidSizeIron, GidSizeHumble} {
				for _, in := range [][]byte{data, padded} {
					got, gotSize, err := UnmarshalDiscovery(in, prefer)
					if err != nil {
						t.Fatalf("%d-byte layout (prefer %d): %v", size, prefer, err)
					}
					if gotSize != size {
						t.Fatalf("%d-byte layout read as %d-byte (prefer %d)", size, gotSize, prefer)
					}
					want := *info
					if len(want.NodeEntitiesInfoSeq) == 0 {
						want.NodeEntitiesInfoSeq = nil
					}
					for i := range want.NodeEntitiesInfoSeq {
						n := &want.NodeEntitiesInfoSeq[i]
						if n.ReaderGidSeq == nil {
							n.ReaderGidSeq = []Gid{}
						}
						if n.WriterGidSeq == nil {
							n.WriterGidSeq = []Gid{}
						}
					}
					if !reflect.DeepEqual(got, &want) {
						t.Fatalf("%d-byte layout decoded\n%+v\nwant\n%+v", size, got, &want)
					}
				}
			}
		}
	}
	if _, err := MarshalDiscovery(&ParticipantEntitiesInfo{}, 20); err == nil {
		t.Fatal("a 20-byte Gid accepted")
	}
	// Truncated and padded-out samples fit neither layout.
	data, _ := MarshalDiscovery(&ParticipantEntitiesInfo{Gid: g, NodeEntitiesInfoSeq: []NodeEntitiesInfo{{NodeNamespace: "/", NodeName: "n"}}}, GidSizeHumble)
	for _, bad := range [][]byte{data[:len(data)-5], append(append([]byte{}, data...), make([]byte, 12)...), {0, 1, 0, 0}, {9, 9, 0, 0, 1}} {
		_, _, err := UnmarshalDiscovery(bad, GidSizeIron)
		requireCDRError(t, err, "16-byte Gids")
		if !strings.Contains(err.Error(), "24-byte Gids") {
			t.Fatalf("error names one attempt only: %v", err)
		}
	}
}
