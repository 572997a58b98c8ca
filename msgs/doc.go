// Package msgs converts between ROS 1 messages (goroslib's sensor_msgs,
// geometry_msgs, std_msgs types) and the plain Go values the mapping code
// works with: camera images in, point clouds, depth images and poses out.
//
// It is a leaf package: it imports nothing else from this module, so the node,
// the offline tools and the tests can all share one set of codecs. Every
// decoder of outside bytes validates sizes before touching data and returns a
// *DecodeError instead of panicking.
package msgs

import "fmt"

// Kinds of DecodeError. They are stable strings, fit to key counters and
// once-per-kind log lines.
const (
	KindEncoding = "encoding" // the encoding or pixel format is not supported
	KindSize     = "size"     // width, height or data length are inconsistent or out of range
	KindStep     = "step"     // the row stride is too short for the width
	KindCorrupt  = "corrupt"  // compressed bytes could not be decoded
	KindFormat   = "format"   // a field's layout or format string is not understood
	KindCDR      = "cdr"      // CDR bytes are truncated or malformed (msgs/cdr)
)

// DecodeError reports why an incoming message could not be decoded.
type DecodeError struct {
	// Kind is one of the Kind* constants.
	Kind string
	Err  error
}

func (e *DecodeError) Error() string { return fmt.Sprintf("%s: %v", e.Kind, e.Err) }

func (e *DecodeError) Unwrap() error { return e.Err }

func decodeErr(kind, format string, args ...any) *DecodeError {
	return &DecodeError{Kind: kind, Err: fmt.Errorf(format, args...)}
}
