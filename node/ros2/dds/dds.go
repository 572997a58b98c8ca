// Package dds is a small cgo binding to Eclipse Cyclone DDS (0.10, Debian's
// cyclonedds-dev) for ROS 2 traffic: a participant, keyless topics whose
// samples are raw serialized CDR bytes (the way rmw_cyclonedds registers its
// types), and readers and writers with the few QoS settings ROS 2 uses.
// Encoding and decoding the bytes is the caller's business.
//
// The cgo code is built only with the build tag "ros2"; without it every
// constructor returns ErrNotBuilt, so the rest of the program builds and runs
// on machines without Cyclone DDS.
package dds

import (
	"errors"
	"fmt"
	"time"
)

// ErrNotBuilt is returned by NewParticipant in a binary built without the
// "ros2" build tag.
var ErrNotBuilt = errors.New("this binary was built without ROS 2 support; rebuild with -tags ros2 (needs cyclonedds-dev)")

// ParticipantConfig configures a DDS participant.
type ParticipantConfig struct {
	// Domain is the DDS domain id (ROS_DOMAIN_ID).
	Domain uint32
	// (optional) XML is a Cyclone DDS configuration for the domain, used
	// instead of CYCLONEDDS_URI when set; Cyclone accepts several
	// comma-separated fragments. It defaults to "" (Cyclone's own lookup).
	XML string
	// (optional) UserData is the participant's USER_DATA, e.g. "enclave=/;".
	UserData string
}

// QoS is the quality of service of a reader or writer.
type QoS struct {
	Reliable       bool
	TransientLocal bool
	// Depth is the keep-last history depth; 0 means 1.
	Depth int
	// (optional) UserData is the endpoint's USER_DATA, e.g. "typehash=RIHS01_…;".
	UserData string
	// (optional) Lifespan, when positive, is how long a writer's samples
	// stay valid (rcl gives /rosout 10 s); 0 is forever.
	Lifespan time.Duration
}

// GUID is a DDS entity's 16-byte global identifier.
type GUID [16]byte

func (g GUID) String() string {
	return fmt.Sprintf("%x.%x.%x.%x", g[0:4], g[4:8], g[8:12], g[12:16])
}

// Sample is one received sample.
type Sample struct {
	// Data is the serialized message with its encapsulation header; DDS may
	// have padded it to a multiple of 4 bytes.
	Data []byte
	// Publication is the instance handle of the writer that sent it, as
	// this participant knows that writer.
	Publication uint64
	// SourceTime is the writer's timestamp in nanoseconds since the epoch.
	SourceTime int64
}

// Error is a failed Cyclone DDS call.
type Error struct {
	Op   string // what was being done, e.g. "creating writer rt/lingbotmap/pose"
	Code int32  // the DDS return code
	Msg  string // dds_strretcode's text
}

func (e *Error) Error() string { return fmt.Sprintf("dds: %s: %s (%d)", e.Op, e.Msg, e.Code) }
