package ros2

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/lingbotmap/lingbotmap/msgs"
	"github.com/lingbotmap/lingbotmap/msgs/cdr"
)

// msgType is what DDS needs to know of a message type.
type msgType struct {
	DDSName string // "geometry_msgs::msg::dds_::PoseStamped_"
	Hash    string // "RIHS01_…"
}

func typeOf(msg any) (msgType, error) {
	t, err := cdr.TypeOf(msg)
	if err != nil {
		return msgType{}, err
	}
	return msgType{DDSName: t.DDSName, Hash: t.Hash}, nil
}

// typeHashUserData is the USER_DATA entry REP 2011 gives each endpoint.
func typeHashUserData(hash string) string {
	if hash == "" {
		return ""
	}
	return "typehash=" + hash + ";"
}

func marshal(msg any) ([]byte, error) { return cdr.Marshal(msg) }

// unmarshal decodes a received sample; every failure is a *msgs.DecodeError.
func unmarshal(data []byte, msg any) error {
	err := cdr.Unmarshal(data, msg)
	var de *msgs.DecodeError
	if err != nil && !errors.As(err, &de) {
		return &msgs.DecodeError{Kind: "cdr", Err: err}
	}
	return err
}

// requestHeaderSize is rmw_cyclonedds's request header: the client's id
// (its request writer's instance handle, uint64) and the sequence number
// (int64), between the encapsulation header and the body of every request
// and reply.
const requestHeaderSize = 16

type requestHeader struct {
	Client uint64
	Seq    int64
}

// splitRequest takes the request header out of a service sample and
// returns it with the body as a CDR message of its own.
func splitRequest(data []byte) (requestHeader, []byte, error) {
	if len(data) < 4+requestHeaderSize {
		return requestHeader{}, nil, &msgs.DecodeError{Kind: "cdr", Err: fmt.Errorf("service sample of %d bytes is shorter than its headers (20 bytes)", len(data))}
	}
	var bo binary.ByteOrder = binary.LittleEndian
	switch {
	case data[0] == 0 && data[1] == 0: // CDR_BE
		bo = binary.BigEndian
	case data[0] == 0 && data[1] == 1: // CDR_LE
	default:
		return requestHeader{}, nil, &msgs.DecodeError{Kind: "cdr", Err: fmt.Errorf("unknown encapsulation % x", data[:4])}
	}
	h := requestHeader{Client: bo.Uint64(data[4:12]), Seq: int64(bo.Uint64(data[12:20]))}
	body := make([]byte, 0, len(data)-requestHeaderSize)
	body = append(append(body, data[:4]...), data[20:]...)
	return h, body, nil
}

// joinRequest puts header h in front of the body of msg, a CDR message with
// its encapsulation header.
func joinRequest(h requestHeader, msg []byte) ([]byte, error) {
	if len(msg) < 4 || msg[0] != 0 || msg[1] != 1 {
		return nil, fmt.Errorf("want a little-endian CDR message, got % x", msg[:min(4, len(msg))])
	}
	out := make([]byte, 0, len(msg)+requestHeaderSize)
	out = append(out, msg[:4]...)
	out = binary.LittleEndian.AppendUint64(out, h.Client)
	out = binary.LittleEndian.AppendUint64(out, uint64(h.Seq))
	return append(out, msg[4:]...), nil
}
