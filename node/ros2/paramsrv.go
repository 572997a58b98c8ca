package ros2

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lingbotmap/lingbotmap/msgs/cdr"
	"github.com/lingbotmap/lingbotmap/node"
	"github.com/lingbotmap/lingbotmap/node/ros2/dds"
)

// The parameters of an rclcpp node: the six rcl_interfaces services under
// the node's name (~/get_parameters, ...) and /parameter_events. Every
// setting of the configuration schema is a declared parameter with its type,
// description, range and read-only flag (config.Meta); use_sim_time is
// declared as rclcpp declares it on every node.

// parameterEventsTopic is where rclcpp nodes announce parameter changes.
const parameterEventsTopic = "/parameter_events"

// useSimTime is the parameter rclcpp declares on every node.
const useSimTime = "use_sim_time"

// parametersQoS is rmw_qos_profile_parameters and
// rmw_qos_profile_parameter_events: reliable, volatile, keep last 1000.
var parametersQoS = dds.QoS{Reliable: true, Depth: 1000}

var _ node.ParamServer = (*Transport)(nil)

// paramServer answers the parameter services of one node.
type paramServer struct {
	t      *Transport
	h      node.ParamHost
	events *dds.Writer

	mu      sync.Mutex // orders changes and their events
	simTime bool
}

// ServeParams offers the node's settings as ROS 2 parameters (node.ParamServer).
func (t *Transport) ServeParams(h node.ParamHost) (io.Closer, error) {
	pp, err := t.participant()
	if err != nil {
		return nil, err
	}
	ps := &paramServer{t: t, h: h}
	if set, _ := t.args.Params.IsSet(useSimTime); set {
		b, err := t.args.Params.Bool(useSimTime)
		if err != nil {
			return nil, fmt.Errorf("ros2: parameter %s: %w", useSimTime, err)
		}
		ps.simTime = b
	}
	et, err := typeOf(&cdr.ParameterEvent{})
	if err != nil {
		return nil, err
	}
	q := parametersQoS
	q.UserData = typeHashUserData(et.Hash)
	ps.events, err = pp.NewWriter(topicName(parameterEventsTopic), et.DDSName, q)
	if err != nil {
		return nil, fmt.Errorf("ros2: advertising %s: %w", parameterEventsTopic, err)
	}
	t.addEntity(t.writers, ps.events.GUID())
	closers := []io.Closer{closerFunc(func() error {
		err := ps.events.Close()
		t.removeEntity(t.writers, ps.events.GUID())
		return err
	})}
	closeAll := func() error {
		var errs []error
		for _, c := range slices.Backward(closers) {
			errs = append(errs, c.Close())
		}
		return errors.Join(errs...)
	}
	for _, s := range []struct {
		name, typ string
		newReq    func() any
		handle    func(req any) any
	}{
		{"describe_parameters", cdr.DescribeParametersSrv, func() any { return &cdr.DescribeParametersRequest{} },
			func(r any) any { return ps.describe(r.(*cdr.DescribeParametersRequest)) }},
		{"get_parameter_types", cdr.GetParameterTypesSrv, func() any { return &cdr.GetParameterTypesRequest{} },
			func(r any) any { return ps.types(r.(*cdr.GetParameterTypesRequest)) }},
		{"get_parameters", cdr.GetParametersSrv, func() any { return &cdr.GetParametersRequest{} },
			func(r any) any { return ps.get(r.(*cdr.GetParametersRequest)) }},
		{"list_parameters", cdr.ListParametersSrv, func() any { return &cdr.ListParametersRequest{} },
			func(r any) any { return ps.list(r.(*cdr.ListParametersRequest)) }},
		{"set_parameters", cdr.SetParametersSrv, func() any { return &cdr.SetParametersRequest{} },
			func(r any) any { return ps.set(r.(*cdr.SetParametersRequest)) }},
		{"set_parameters_atomically", cdr.SetParametersAtomicallySrv, func() any { return &cdr.SetParametersAtomicallyRequest{} },
			func(r any) any { return ps.setAtomically(r.(*cdr.SetParametersAtomicallyRequest)) }},
	} {
		c, err := t.serveService(t.Resolve("~/"+s.name), s.typ, parametersQoS, s.newReq, s.handle)
		if err != nil {
			closeAll()
			return nil, err
		}
		closers = append(closers, c)
	}
	// rclcpp announces each declared parameter as new.
	ev := &cdr.ParameterEvent{Stamp: time.Now(), Node: t.FullName()}
	for _, p := range ps.params() {
		ev.NewParameters = append(ev.NewParameters, cdr.Parameter{Name: p.Key, Value: toParameterValue(p.Value)})
	}
	ps.publish(ev)
	t.log.Info("serving parameters", "count", len(ev.NewParameters))
	var once sync.Once
	return closerFunc(func() error {
		var err error
		once.Do(func() { err = closeAll() })
		return err
	}), nil
}

// params lists the declared parameters: the schema's settings and use_sim_time.
func (ps *paramServer) params() []node.LiveParam {
	out := ps.h.LiveParams()
	ps.mu.Lock()
	sim := ps.simTime
	ps.mu.Unlock()
	out = append(out, node.LiveParam{Key: useSimTime, Value: sim})
	out[len(out)-1].Description = "Declared as on every rclcpp node. The node's outputs carry the stamps of the input images, so simulated time changes nothing."
	out[len(out)-1].Dynamic = true
	return out
}

func (ps *paramServer) lookup(name string) (node.LiveParam, bool) {
	for _, p := range ps.params() {
		if p.Key == name {
			return p, true
		}
	}
	return node.LiveParam{}, false
}

func (ps *paramServer) publish(ev *cdr.ParameterEvent) {
	b, err := marshal(ev)
	if err == nil {
		err = ps.events.Write(b)
	}
	if err != nil {
		ps.t.log.Warn("publishing a parameter event", "err", err)
	}
}

func (ps *paramServer) describe(req *cdr.DescribeParametersRequest) *cdr.DescribeParametersResponse {
	resp := &cdr.DescribeParametersResponse{}
	for _, name := range req.Names {
		p, ok := ps.lookup(name)
		if !ok {
			// rclcpp answers nothing when a name is not declared.
			ps.t.log.Warn("describe_parameters: not declared", "parameter", name)
			return &cdr.DescribeParametersResponse{}
		}
		resp.Descriptors = append(resp.Descriptors, descriptorOf(p))
	}
	return resp
}

func (ps *paramServer) types(req *cdr.GetParameterTypesRequest) *cdr.GetParameterTypesResponse {
	resp := &cdr.GetParameterTypesResponse{Types: []uint8{}}
	for _, name := range req.Names {
		p, _ := ps.lookup(name)
		resp.Types = append(resp.Types, toParameterValue(p.Value).Type)
	}
	return resp
}

func (ps *paramServer) get(req *cdr.GetParametersRequest) *cdr.GetParametersResponse {
	resp := &cdr.GetParametersResponse{Values: []cdr.ParameterValue{}}
	for _, name := range req.Names {
		p, _ := ps.lookup(name)
		resp.Values = append(resp.Values, toParameterValue(p.Value))
	}
	return resp
}

// list answers as rclcpp does: with no prefixes every name within depth
// (0 = any) dots, else the names equal to a prefix or under it; each name's
// part before its last dot is a prefix.
func (ps *paramServer) list(req *cdr.ListParametersRequest) *cdr.ListParametersResponse {
	res := cdr.ListParametersResult{Names: []string{}, Prefixes: []string{}}
	within := func(s string) bool { return req.Depth == 0 || uint64(strings.Count(s, ".")) < req.Depth }
	for _, p := range ps.params() {
		name := p.Key
		ok := len(req.Prefixes) == 0 && within(name)
		for _, pre := range req.Prefixes {
			if name == pre || (strings.HasPrefix(name, pre+".") && within(name[len(pre)+1:])) {
				ok = true
			}
		}
		if !ok {
			continue
		}
		res.Names = append(res.Names, name)
		if i := strings.LastIndexByte(name, '.'); i > 0 && !slices.Contains(res.Prefixes, name[:i]) {
			res.Prefixes = append(res.Prefixes, name[:i])
		}
	}
	return &cdr.ListParametersResponse{Result: res}
}

func (ps *paramServer) set(req *cdr.SetParametersRequest) *cdr.SetParametersResponse {
	resp := &cdr.SetParametersResponse{Results: []cdr.SetParametersResult{}}
	for _, p := range req.Parameters {
		resp.Results = append(resp.Results, ps.apply([]cdr.Parameter{p}))
	}
	return resp
}

func (ps *paramServer) setAtomically(req *cdr.SetParametersAtomicallyRequest) *cdr.SetParametersAtomicallyResponse {
	return &cdr.SetParametersAtomicallyResponse{Result: ps.apply(req.Parameters)}
}

// apply sets params all or none, announces the change on /parameter_events
// and keeps the new values where the node reads its parameters (save_dir).
func (ps *paramServer) apply(params []cdr.Parameter) cdr.SetParametersResult {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	vals := map[string]any{}
	sim, setSim := ps.simTime, false
	var errs []error
	for _, p := range params {
		v, err := fromParameterValue(p.Value)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("parameter '%s': %w", p.Name, err))
		case p.Name == useSimTime:
			b, ok := v.(bool)
			if !ok {
				errs = append(errs, fmt.Errorf("parameter '%s' has type bool; a value of type %s cannot set it", p.Name, typeName(p.Value.Type)))
				continue
			}
			sim, setSim = b, true
		default:
			if _, dup := vals[p.Name]; dup {
				errs = append(errs, fmt.Errorf("parameter '%s' is given twice", p.Name))
			}
			vals[p.Name] = v
		}
	}
	if len(errs) > 0 {
		err := errors.Join(errs...)
		ps.h.Refused(names(params), err)
		return cdr.SetParametersResult{Reason: err.Error()}
	}
	if len(vals) > 0 {
		// The node logs and counts its own refusals.
		if err := ps.h.SetParams(vals); err != nil {
			return cdr.SetParametersResult{Reason: err.Error()}
		}
	}
	ev := &cdr.ParameterEvent{Stamp: time.Now(), Node: ps.t.FullName()}
	for _, p := range params {
		if p.Name == useSimTime {
			continue
		}
		if err := ps.t.args.Params.set(normKey(p.Name), vals[p.Name]); err != nil {
			ps.t.log.Warn("keeping a parameter's new value", "parameter", p.Name, "err", err)
		}
		ev.ChangedParameters = append(ev.ChangedParameters, cdr.Parameter{Name: p.Name, Value: p.Value})
	}
	if setSim {
		ps.simTime = sim
		ev.ChangedParameters = append(ev.ChangedParameters, cdr.Parameter{Name: useSimTime, Value: toParameterValue(sim)})
		ps.t.log.Info("parameter changed", "parameter", useSimTime, "value", sim)
	}
	ps.publish(ev)
	return cdr.SetParametersResult{Successful: true}
}

func names(params []cdr.Parameter) string {
	var s []string
	for _, p := range params {
		s = append(s, p.Name)
	}
	return strings.Join(s, ",")
}

// descriptorOf describes p as rcl_interfaces does: bounds become a range of
// the parameter's type; open sides reach the type's limits.
func descriptorOf(p node.LiveParam) cdr.ParameterDescriptor {
	v := toParameterValue(p.Value)
	d := cdr.ParameterDescriptor{Name: p.Key, Type: v.Type, Description: p.Description,
		AdditionalConstraints: p.Constraints(), ReadOnly: !p.Dynamic}
	if p.Min == nil && p.Max == nil {
		return d
	}
	switch v.Type {
	case cdr.ParameterInteger:
		r := cdr.IntegerRange{FromValue: math.MinInt64, ToValue: math.MaxInt64}
		if p.Min != nil {
			r.FromValue = int64(*p.Min)
		}
		if p.Max != nil {
			r.ToValue = int64(*p.Max)
		}
		d.IntegerRange = []cdr.IntegerRange{r}
	case cdr.ParameterDouble:
		r := cdr.FloatingPointRange{FromValue: -math.MaxFloat64, ToValue: math.MaxFloat64}
		if p.Min != nil {
			r.FromValue = *p.Min
		}
		if p.Max != nil {
			r.ToValue = *p.Max
		}
		d.FloatingPointRange = []cdr.FloatingPointRange{r}
	}
	return d
}

// toParameterValue wraps a LiveParam's value; nil is PARAMETER_NOT_SET.
func toParameterValue(v any) cdr.ParameterValue {
	switch x := v.(type) {
	case bool:
		return cdr.ParameterValue{Type: cdr.ParameterBool, BoolValue: x}
	case int64:
		return cdr.ParameterValue{Type: cdr.ParameterInteger, IntegerValue: x}
	case float64:
		return cdr.ParameterValue{Type: cdr.ParameterDouble, DoubleValue: x}
	case string:
		return cdr.ParameterValue{Type: cdr.ParameterString, StringValue: x}
	case []int64:
		return cdr.ParameterValue{Type: cdr.ParameterIntegerArray, IntegerArrayValue: x}
	}
	return cdr.ParameterValue{Type: cdr.ParameterNotSet}
}

// fromParameterValue unwraps a requested value (nil for NOT_SET).
func fromParameterValue(v cdr.ParameterValue) (any, error) {
	switch v.Type {
	case cdr.ParameterNotSet:
		return nil, nil
	case cdr.ParameterBool:
		return v.BoolValue, nil
	case cdr.ParameterInteger:
		return v.IntegerValue, nil
	case cdr.ParameterDouble:
		return v.DoubleValue, nil
	case cdr.ParameterString:
		return v.StringValue, nil
	case cdr.ParameterByteArray:
		return v.ByteArrayValue, nil
	case cdr.ParameterBoolArray:
		return v.BoolArrayValue, nil
	case cdr.ParameterIntegerArray:
		return v.IntegerArrayValue, nil
	case cdr.ParameterDoubleArray:
		return v.DoubleArrayValue, nil
	case cdr.ParameterStringArray:
		return v.StringArrayValue, nil
	}
	return nil, fmt.Errorf("unknown parameter type %d", v.Type)
}

func typeName(t uint8) string {
	names := []string{"not set", "bool", "integer", "double", "string", "byte array", "bool array",
		"integer array", "double array", "string array"}
	if int(t) < len(names) {
		return names[t]
	}
	return fmt.Sprintf("unknown (%d)", t)
}

// serveService offers service type srvType at name (resolved) through the
// transport's service plumbing (service.go, both RMWs' clients): each
// request is decoded into newReq's value and handle's reply is sent back.
func (t *Transport) serveService(name, srvType string, q dds.QoS, newReq func() any, handle func(req any) any) (io.Closer, error) {
	srv, err := cdr.ServiceByName(srvType)
	if err != nil {
		return nil, fmt.Errorf("ros2: service %s: %w", name, err)
	}
	return t.serve(name, srv, q, func(_ context.Context, b []byte) ([]byte, error) {
		req := newReq()
		if err := unmarshal(b, req); err != nil {
			return nil, err
		}
		return marshal(handle(req))
	})
}
