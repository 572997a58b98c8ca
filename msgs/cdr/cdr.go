package cdr

import (
	"fmt"
	"reflect"
	"sync"

	"github.com/lingbotmap/lingbotmap/msgs"
)

// Type describes a ROS 2 message type.
type Type struct {
	Name    string // "geometry_msgs/msg/PoseStamped"
	DDSName string // "geometry_msgs::msg::dds_::PoseStamped_"
	Hash    string // REP 2011 "RIHS01_<64 hex>"
	Schema  string // ros2msg text with dependencies (MCAP schema data)
}

// ServiceType describes a ROS 2 service type.
type ServiceType struct {
	Name     string // "std_srvs/srv/Trigger"
	Request  Type   // the request message, "std_srvs/srv/Trigger_Request"
	Response Type   // the response message
	// Hash is the REP 2011 hash of the service as a whole, which Iron and
	// later RMWs announce for both the request and the reply topic.
	Hash string
}

// registry is what the package derives once from its type catalog.
type registry struct {
	cat      *catalog
	bindings map[reflect.Type]*binding
	types    map[*typeDesc]Type
}

// theRegistry is built on first use and never changes afterwards.
var theRegistry = sync.OnceValues(func() (*registry, error) {
	r := &registry{cat: newCatalog(), bindings: map[reflect.Type]*binding{}, types: map[*typeDesc]Type{}}
	for goType, desc := range r.cat.byGo {
		if _, err := bind(desc, goType, r.cat, r.bindings); err != nil {
			return nil, err
		}
	}
	for _, desc := range r.cat.byName {
		r.types[desc] = Type{Name: desc.name, DDSName: desc.ddsName(), Hash: desc.hash(), Schema: desc.schema()}
	}
	return r, nil
})

// lookup finds the binding of msg's type (a struct or a pointer to one).
func lookup(msg any) (*binding, *registry, error) {
	r, err := theRegistry()
	if err != nil {
		return nil, nil, err
	}
	t := reflect.TypeOf(msg)
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	b, ok := r.bindings[t]
	if !ok || b.isTime {
		return nil, nil, fmt.Errorf("cdr: %T is not a ROS 2 message type this package knows", msg)
	}
	return b, r, nil
}

// Marshal encodes msg as XCDR1 little-endian CDR with the 4-byte
// encapsulation header 00 01 00 00. msg is a pointer to (or a value of) a
// goroslib message struct (geometry_msgs.PoseStamped, sensor_msgs.Image, ...)
// or one of this package's ROS-2-only types. Values CDR cannot carry
// (a stamp outside int32 seconds, a string with a NUL, a bounded field over
// its bound) are errors.
func Marshal(msg any) ([]byte, error) {
	b, _, err := lookup(msg)
	if err != nil {
		return nil, err
	}
	v := reflect.ValueOf(msg)
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil, fmt.Errorf("cdr: cannot encode a nil %T", msg)
		}
		v = v.Elem()
	}
	e := encoder{buf: make([]byte, headerSize, headerSize+b.minSize+64)}
	e.buf[1] = encCDRLE
	if err := e.value(b, v, b.desc.name); err != nil {
		return nil, fmt.Errorf("cdr: encoding %w", err)
	}
	return e.buf, nil
}

// Unmarshal decodes data, a CDR payload with its encapsulation header (little
// or big endian plain CDR), into msg, a non-nil pointer to one of the types
// Marshal accepts. Every field of msg is overwritten; Go fields without a
// ROS 2 counterpart (Header.Seq) are zeroed. Malformed input gives a
// *msgs.DecodeError of kind msgs.KindCDR naming the field being read; bytes
// after the message (alignment padding) are ignored.
func Unmarshal(data []byte, msg any) error {
	b, _, err := lookup(msg)
	if err != nil {
		return err
	}
	v := reflect.ValueOf(msg)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return fmt.Errorf("cdr: Unmarshal needs a non-nil pointer, not %T", msg)
	}
	d, err := newDecoder(data)
	if err != nil {
		return cdrError(fmt.Errorf("%s: %w", b.desc.name, err))
	}
	v = v.Elem()
	v.Set(reflect.Zero(v.Type()))
	if err := d.value(b, v, b.desc.name); err != nil {
		return cdrError(err)
	}
	return nil
}

func cdrError(err error) error { return &msgs.DecodeError{Kind: msgs.KindCDR, Err: err} }

// TypeOf describes msg's ROS 2 type. msg is a value of (or a pointer to) a
// type Marshal accepts.
func TypeOf(msg any) (Type, error) {
	b, r, err := lookup(msg)
	if err != nil {
		return Type{}, err
	}
	return r.types[b.desc], nil
}

// TypeByName describes the ROS 2 message type name ("sensor_msgs/msg/Image").
func TypeByName(name string) (Type, bool) {
	r, err := theRegistry()
	if err != nil {
		return Type{}, false
	}
	d, ok := r.cat.byName[name]
	if !ok {
		return Type{}, false
	}
	return r.types[d], true
}

// TriggerService describes std_srvs/srv/Trigger.
func TriggerService() (ServiceType, error) {
	r, err := theRegistry()
	if err != nil {
		return ServiceType{}, err
	}
	return r.service(r.cat.trigger), nil
}

// service is the ServiceType of a service description (request, response,
// event_message).
func (r *registry) service(srv *typeDesc) ServiceType {
	return ServiceType{
		Name:     srv.name,
		Request:  r.types[srv.fields[0].nested],
		Response: r.types[srv.fields[1].nested],
		Hash:     r.types[srv].Hash,
	}
}
