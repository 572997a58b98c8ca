// Package fastdds is a small cgo binding to eProsima Fast DDS 2.x (Debian's
// libfastrtps-dev) for the one thing Cyclone DDS 0.10 cannot do for a ROS 2
// node: answer service clients on rmw_fastrtps. Those clients pair a reply
// with its request by DDS sample identities, which travel as inline QoS
// (PID_RELATED_SAMPLE_IDENTITY) that Cyclone's C API neither reads nor
// writes. Samples are raw serialized CDR bytes, as in package dds.
//
// The cgo code is built only with the build tag "ros2"; without it every
// constructor returns ErrNotBuilt.
package fastdds

import (
	"errors"
	"fmt"
)

// ErrNotBuilt is returned by NewParticipant in a binary built without the
// "ros2" build tag.
var ErrNotBuilt = errors.New("this binary was built without ROS 2 support; rebuild with -tags ros2 (needs libfastrtps-dev)")

// GUID is a DDS entity's 16-byte global identifier (prefix, then entity id).
type GUID [16]byte

func (g GUID) String() string {
	return fmt.Sprintf("%x.%x.%x.%x", g[0:4], g[4:8], g[8:12], g[12:16])
}

// IsZero reports whether g is GUID_UNKNOWN.
func (g GUID) IsZero() bool { return g == GUID{} }

// Identity is a DDS sample identity: the writer's GUID and the sample's
// sequence number.
type Identity struct {
	Writer GUID
	Seq    int64
}

// ParticipantConfig configures a participant.
type ParticipantConfig struct {
	// Domain is the DDS domain id (ROS_DOMAIN_ID).
	Domain uint32
	// LocalhostOnly keeps discovery and traffic on 127.0.0.1.
	LocalhostOnly bool
	// (optional) Peers are extra unicast discovery addresses (ROS_STATIC_PEERS).
	Peers []string
	// (optional) UserData is the participant's USER_DATA, e.g. "enclave=/;".
	UserData string
	// (optional) GUIDPrefix fixes the participant's 12-byte GUID prefix
	// (RTPS 8.2.4.2), whose first two bytes are by custom the vendor id;
	// empty lets Fast DDS make one (starting with its own, 01.0f).
	GUIDPrefix []byte
}

// QoS is the quality of service of a reader or writer.
type QoS struct {
	Reliable       bool
	TransientLocal bool
	// Depth is the keep-last history depth; 0 means 1.
	Depth int
	// (optional) UserData is the endpoint's USER_DATA.
	UserData string
}

// Sample is one received sample.
type Sample struct {
	// Data is the serialized message with its encapsulation header.
	Data []byte
	// ID is the sample's own identity (its writer and sequence number).
	ID Identity
	// Related is the related sample identity the writer attached (zero when
	// none); rmw_fastrtps's clients put their reply reader's GUID here.
	Related Identity
	// SourceTime is the writer's timestamp in nanoseconds since the epoch.
	SourceTime int64
}
