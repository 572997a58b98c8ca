package cdr

import (
	"reflect"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/diagnostic_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/nav_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/tf2_msgs"
)

// TriggerRequest is std_srvs/srv/Trigger's request. The service's request is
// empty; rosidl gives every empty structure this one uint8 member.
type TriggerRequest struct {
	StructureNeedsAtLeastOneMember uint8
}

// TriggerResponse is std_srvs/srv/Trigger's response.
type TriggerResponse struct {
	Success bool
	Message string
}

// Gid is rmw_dds_common/msg/Gid: a DDS entity's GUID. On the wire its data
// is char[16] from Iron on and char[24] (the GUID, zero padded) in Humble;
// Marshal and Unmarshal use Iron's layout, MarshalDiscovery and
// UnmarshalDiscovery either (discovery.go).
type Gid struct {
	Data [GidSizeIron]uint8
}

// NodeEntitiesInfo is rmw_dds_common/msg/NodeEntitiesInfo: one node of a
// participant and the GIDs of its readers and writers.
type NodeEntitiesInfo struct {
	NodeNamespace string
	NodeName      string
	ReaderGidSeq  []Gid
	WriterGidSeq  []Gid
}

// ParticipantEntitiesInfo is rmw_dds_common/msg/ParticipantEntitiesInfo, the
// message of the ros_discovery_info topic through which `ros2 node list`
// learns which nodes a participant holds.
type ParticipantEntitiesInfo struct {
	Gid                 Gid
	NodeEntitiesInfoSeq []NodeEntitiesInfo
}

// Helpers that keep the type table below close to the .msg files.

func prim(name string, b base) field         { return field{name: name, base: b} }
func nest(name string, t *typeDesc) field    { return field{name: name, base: tNested, nested: t} }
func arrayOf(f field, n int) field           { f.cont, f.length = array, n; return f }
func seqOf(f field) field                    { f.cont = sequence; return f }
func boundedSeqOf(f field, n int) field      { f.cont, f.length = boundedSeq, n; return f }
func boundedString(name string, n int) field { return field{name: name, base: tBString, strCap: n} }

func xyz(name string, extra ...string) *typeDesc {
	t := &typeDesc{name: name}
	for _, n := range append([]string{"x", "y", "z"}, extra...) {
		t.fields = append(t.fields, prim(n, tFloat64))
	}
	return t
}

// catalog holds the description of every type this package knows and the
// Go type each one is read into.
type catalog struct {
	byGo   map[reflect.Type]*typeDesc
	byName map[string]*typeDesc
	// trigger is the std_srvs/srv/Trigger service type, which has no Go
	// value of its own.
	trigger *typeDesc
}

// newCatalog describes the ROS 2 interfaces (Humble/Jazzy definitions from
// common_interfaces, rcl_interfaces and rmw_dds_common).
func newCatalog() *catalog {
	c := &catalog{byGo: map[reflect.Type]*typeDesc{}, byName: map[string]*typeDesc{}}
	add := func(goValue any, t *typeDesc) *typeDesc {
		c.byName[t.name] = t
		if goValue != nil {
			c.byGo[reflect.TypeOf(goValue)] = t
		}
		return t
	}

	tm := add(time.Time{}, &typeDesc{name: "builtin_interfaces/msg/Time", fields: []field{
		prim("sec", tInt32), prim("nanosec", tUint32)}})
	header := add(std_msgs.Header{}, &typeDesc{name: "std_msgs/msg/Header", fields: []field{
		nest("stamp", tm), prim("frame_id", tString)}})

	point := add(geometry_msgs.Point{}, xyz("geometry_msgs/msg/Point"))
	quat := add(geometry_msgs.Quaternion{}, xyz("geometry_msgs/msg/Quaternion", "w"))
	vec := add(geometry_msgs.Vector3{}, xyz("geometry_msgs/msg/Vector3"))
	pose := add(geometry_msgs.Pose{}, &typeDesc{name: "geometry_msgs/msg/Pose", fields: []field{
		nest("position", point), nest("orientation", quat)}})
	poseStamped := add(geometry_msgs.PoseStamped{}, &typeDesc{name: "geometry_msgs/msg/PoseStamped", fields: []field{
		nest("header", header), nest("pose", pose)}})
	transform := add(geometry_msgs.Transform{}, &typeDesc{name: "geometry_msgs/msg/Transform", fields: []field{
		nest("translation", vec), nest("rotation", quat)}})
	tfStamped := add(geometry_msgs.TransformStamped{}, &typeDesc{name: "geometry_msgs/msg/TransformStamped", fields: []field{
		nest("header", header), prim("child_frame_id", tString), nest("transform", transform)}})
	twist := add(geometry_msgs.Twist{}, &typeDesc{name: "geometry_msgs/msg/Twist", fields: []field{
		nest("linear", vec), nest("angular", vec)}})
	poseCov := add(geometry_msgs.PoseWithCovariance{}, &typeDesc{name: "geometry_msgs/msg/PoseWithCovariance", fields: []field{
		nest("pose", pose), arrayOf(prim("covariance", tFloat64), 36)}})
	twistCov := add(geometry_msgs.TwistWithCovariance{}, &typeDesc{name: "geometry_msgs/msg/TwistWithCovariance", fields: []field{
		nest("twist", twist), arrayOf(prim("covariance", tFloat64), 36)}})

	add(nav_msgs.Path{}, &typeDesc{name: "nav_msgs/msg/Path", fields: []field{
		nest("header", header), seqOf(nest("poses", poseStamped))}})
	add(nav_msgs.Odometry{}, &typeDesc{name: "nav_msgs/msg/Odometry", fields: []field{
		nest("header", header), prim("child_frame_id", tString), nest("pose", poseCov), nest("twist", twistCov)}})
	mapMeta := add(nav_msgs.MapMetaData{}, &typeDesc{name: "nav_msgs/msg/MapMetaData", fields: []field{
		nest("map_load_time", tm), prim("resolution", tFloat32), prim("width", tUint32), prim("height", tUint32),
		nest("origin", pose)}})
	add(nav_msgs.OccupancyGrid{}, &typeDesc{name: "nav_msgs/msg/OccupancyGrid", fields: []field{
		nest("header", header), nest("info", mapMeta), seqOf(prim("data", tInt8))}})
	add(tf2_msgs.TFMessage{}, &typeDesc{name: "tf2_msgs/msg/TFMessage", fields: []field{
		seqOf(nest("transforms", tfStamped))}})

	add(sensor_msgs.Image{}, &typeDesc{name: "sensor_msgs/msg/Image", fields: []field{
		nest("header", header), prim("height", tUint32), prim("width", tUint32), prim("encoding", tString),
		prim("is_bigendian", tUint8), prim("step", tUint32), seqOf(prim("data", tUint8))}})
	add(sensor_msgs.CompressedImage{}, &typeDesc{name: "sensor_msgs/msg/CompressedImage", fields: []field{
		nest("header", header), prim("format", tString), seqOf(prim("data", tUint8))}})
	roi := add(sensor_msgs.RegionOfInterest{}, &typeDesc{name: "sensor_msgs/msg/RegionOfInterest", fields: []field{
		prim("x_offset", tUint32), prim("y_offset", tUint32), prim("height", tUint32), prim("width", tUint32),
		prim("do_rectify", tBool)}})
	add(sensor_msgs.CameraInfo{}, &typeDesc{name: "sensor_msgs/msg/CameraInfo", fields: []field{
		nest("header", header), prim("height", tUint32), prim("width", tUint32), prim("distortion_model", tString),
		seqOf(prim("d", tFloat64)), arrayOf(prim("k", tFloat64), 9), arrayOf(prim("r", tFloat64), 9),
		arrayOf(prim("p", tFloat64), 12), prim("binning_x", tUint32), prim("binning_y", tUint32), nest("roi", roi)}})
	pointField := add(sensor_msgs.PointField{}, &typeDesc{name: "sensor_msgs/msg/PointField",
		consts: []constant{{"uint8", "INT8", "1"}, {"uint8", "UINT8", "2"}, {"uint8", "INT16", "3"}, {"uint8", "UINT16", "4"},
			{"uint8", "INT32", "5"}, {"uint8", "UINT32", "6"}, {"uint8", "FLOAT32", "7"}, {"uint8", "FLOAT64", "8"}},
		fields: []field{prim("name", tString), prim("offset", tUint32), prim("datatype", tUint8), prim("count", tUint32)}})
	add(sensor_msgs.PointCloud2{}, &typeDesc{name: "sensor_msgs/msg/PointCloud2", fields: []field{
		nest("header", header), prim("height", tUint32), prim("width", tUint32), seqOf(nest("fields", pointField)),
		prim("is_bigendian", tBool), prim("point_step", tUint32), prim("row_step", tUint32),
		seqOf(prim("data", tUint8)), prim("is_dense", tBool)}})

	kv := add(diagnostic_msgs.KeyValue{}, &typeDesc{name: "diagnostic_msgs/msg/KeyValue", fields: []field{
		prim("key", tString), prim("value", tString)}})
	status := add(diagnostic_msgs.DiagnosticStatus{}, &typeDesc{name: "diagnostic_msgs/msg/DiagnosticStatus",
		consts: []constant{{"byte", "OK", "0"}, {"byte", "WARN", "1"}, {"byte", "ERROR", "2"}, {"byte", "STALE", "3"}},
		fields: []field{prim("level", tByte), prim("name", tString), prim("message", tString), prim("hardware_id", tString),
			seqOf(nest("values", kv))}})
	add(diagnostic_msgs.DiagnosticArray{}, &typeDesc{name: "diagnostic_msgs/msg/DiagnosticArray", fields: []field{
		nest("header", header), seqOf(nest("status", status))}})

	req := add(TriggerRequest{}, &typeDesc{name: "std_srvs/srv/Trigger_Request", fields: []field{
		prim("structure_needs_at_least_one_member", tUint8)}})
	resp := add(TriggerResponse{}, &typeDesc{name: "std_srvs/srv/Trigger_Response", fields: []field{
		prim("success", tBool), prim("message", tString)}})
	c.trigger = serviceDesc(c, "std_srvs/srv/Trigger", req, resp, tm)
	addRclInterfaces(c, add, tm)

	gid, node, participant := discoveryDescs(GidSizeIron)
	add(Gid{}, gid)
	add(NodeEntitiesInfo{}, node)
	add(ParticipantEntitiesInfo{}, participant)
	return c
}

// serviceDesc describes a service as rosidl does for its hash: a type with
// the request, the response and the service event message (Iron's service
// introspection) as members.
func serviceDesc(c *catalog, name string, req, resp, tm *typeDesc) *typeDesc {
	info := c.byName["service_msgs/msg/ServiceEventInfo"]
	if info == nil {
		info = &typeDesc{name: "service_msgs/msg/ServiceEventInfo",
			consts: []constant{{"uint8", "REQUEST_SENT", "0"}, {"uint8", "REQUEST_RECEIVED", "1"},
				{"uint8", "RESPONSE_SENT", "2"}, {"uint8", "RESPONSE_RECEIVED", "3"}},
			fields: []field{prim("event_type", tUint8), nest("stamp", tm), arrayOf(prim("client_gid", tChar), 16),
				prim("sequence_number", tInt64)}}
		c.byName[info.name] = info
	}
	event := &typeDesc{name: name + "_Event", fields: []field{
		nest("info", info), boundedSeqOf(nest("request", req), 1), boundedSeqOf(nest("response", resp), 1)}}
	c.byName[event.name] = event
	srv := &typeDesc{name: name, fields: []field{
		nest("request_message", req), nest("response_message", resp), nest("event_message", event)}}
	c.byName[srv.name] = srv
	return srv
}

// discoveryDescs describes rmw_dds_common's discovery messages with a Gid of
// gidSize bytes: 24 in Humble, 16 from Iron on.
func discoveryDescs(gidSize int) (gid, node, participant *typeDesc) {
	gid = &typeDesc{name: "rmw_dds_common/msg/Gid", fields: []field{arrayOf(prim("data", tChar), gidSize)}}
	node = &typeDesc{name: "rmw_dds_common/msg/NodeEntitiesInfo", fields: []field{
		boundedString("node_namespace", 256), boundedString("node_name", 256),
		seqOf(nest("reader_gid_seq", gid)), seqOf(nest("writer_gid_seq", gid))}}
	participant = &typeDesc{name: "rmw_dds_common/msg/ParticipantEntitiesInfo", fields: []field{
		nest("gid", gid), seqOf(nest("node_entities_info_seq", node))}}
	return gid, node, participant
}
