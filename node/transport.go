package node

import (
	"context"
	"io"
)

// Transport is the middleware under the node core: ROS 1 (goroslib, package
// node/ros1) or ROS 2 (DDS, package node/ros2). The core never imports a
// transport; cmd/lingbotmap picks one and hands it to the core.
//
// Messages cross this interface as plain Go values: pointers to goroslib's
// message structs (*geometry_msgs.PoseStamped, *sensor_msgs.Image, ...),
// which mirror the ROS message definitions field by field. Each transport
// encodes them in its own wire format (ROS 1 serialization or CDR); fields a
// wire format lacks (ROS 1's Header.Seq in ROS 2) are dropped there.
type Transport interface {
	// Connect joins the ROS graph: ROS 1 registers with the master (waiting
	// until it answers or ctx ends), ROS 2 creates the DDS participant. It
	// is called once, before anything else but FullName, Resolve and Params.
	Connect(ctx context.Context) error
	// FullName is the node's absolute name, e.g. "/lingbotmap".
	FullName() string
	// Resolve turns a graph name ("~pose", "image", "/tf") into an absolute
	// name with the node's namespace and the remaps applied.
	Resolve(name string) string
	// Params reads the node's parameters by configuration key
	// ("engine.weights", "queue_policy"): ROS 1 private parameters
	// (~engine/weights) on the master, ROS 2 parameters given by
	// --ros-args -p / --params-file.
	Params() ParamSource
	// Advertise opens a publisher for spec.
	Advertise(spec TopicSpec) (Publisher, error)
	// Subscribe calls handle for every message on spec.Name, with msg a
	// pointer of spec.Type's type. When the wire bytes cannot be decoded,
	// msg is nil and err says why (a *msgs.DecodeError where the kind is
	// known). handle may block (a full queue holds the sender back).
	Subscribe(spec TopicSpec, handle func(msg any, err error)) (io.Closer, error)
	// ServeTrigger offers a std_srvs/Trigger service named name (resolved):
	// handle's message and error become the response (success = err == nil).
	ServeTrigger(name string, handle func(ctx context.Context) (string, error)) (io.Closer, error)
	// Shutdown is closed when the middleware asks the node to stop (ROS 1:
	// rosnode kill); never closed where there is no such request.
	Shutdown() <-chan struct{}
	// Stats are the transport's counters for /diagnostics.
	Stats() TransportStats
	// Close leaves the graph; publishers, subscriptions and services opened
	// through the transport end with it.
	Close() error
}

// Role is what a topic is for; each transport derives its QoS from it.
type Role int

const (
	// RoleSensor is camera input: ROS 2 sensor-data QoS (best effort, keep
	// last 5, volatile), which both best-effort and reliable drivers match.
	RoleSensor Role = iota
	// RoleOutput is a regular output: reliable, keep last 10.
	RoleOutput
	// RoleLatched keeps the last message for late joiners: a latched ROS 1
	// topic, ROS 2 reliable + transient-local, keep last 1 (~map, ~path).
	RoleLatched
	// RoleTF is /tf: reliable, keep last 100.
	RoleTF
	// RoleTFStatic is /tf_static: latched, reliable + transient-local, keep last 1.
	RoleTFStatic
)

// TopicSpec names a topic, its message type and its role.
type TopicSpec struct {
	// Name is absolute (already resolved).
	Name string
	// Type is a pointer to a zero value of the message struct, e.g.
	// &geometry_msgs.PoseStamped{}.
	Type any
	Role Role
	// BestEffort asks ROS 2 for best-effort reliability instead of the
	// role's reliable (the cloud_reliability setting); ROS 1 has no such
	// choice.
	BestEffort bool
}

// Publisher writes messages of its topic's type.
type Publisher interface {
	Write(msg any) error
	Close() error
}

// TransportStats are counters a transport keeps.
type TransportStats struct {
	// Reconnects counts re-registrations after the ROS 1 master restarted.
	Reconnects int64
	// GidMismatchedPeers counts ROS 2 participants whose ros_discovery_info
	// has the other Gid size (Humble's 24 bytes against Iron's 16).
	GidMismatchedPeers int64
	// GraphUnreadable counts ros_discovery_info samples neither layout reads.
	GraphUnreadable int64
	// BadRequests counts service requests rejected unanswered: malformed,
	// or from a client the transport cannot answer (an unknown ROS 2 RMW).
	BadRequests int64
	// MatchedPublishers and MatchedSubscribers count, per topic, the remote
	// writers matched with the node's readers and the remote readers
	// matched with its writers (ROS 2; nil where the transport has no such
	// count).
	MatchedPublishers, MatchedSubscribers map[string]int
}
