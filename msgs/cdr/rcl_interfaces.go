package cdr

import (
	"fmt"
	"time"
)

// rcl_interfaces (Jazzy): the parameter services and messages an rclcpp
// node offers, /parameter_events and /rosout's Log. Field names follow the
// .msg files; binding finds the Go fields by those names.

// Parameter types: rcl_interfaces/msg/ParameterType's constants, the values
// of ParameterValue.Type and ParameterDescriptor.Type.
const (
	ParameterNotSet       uint8 = 0
	ParameterBool         uint8 = 1
	ParameterInteger      uint8 = 2
	ParameterDouble       uint8 = 3
	ParameterString       uint8 = 4
	ParameterByteArray    uint8 = 5
	ParameterBoolArray    uint8 = 6
	ParameterIntegerArray uint8 = 7
	ParameterDoubleArray  uint8 = 8
	ParameterStringArray  uint8 = 9
)

// Log levels: rcl_interfaces/msg/Log's constants.
const (
	LogDebug uint8 = 10
	LogInfo  uint8 = 20
	LogWarn  uint8 = 30
	LogError uint8 = 40
	LogFatal uint8 = 50
)

// ParameterValue is rcl_interfaces/msg/ParameterValue: Type says which
// member holds the value.
type ParameterValue struct {
	Type              uint8
	BoolValue         bool
	IntegerValue      int64
	DoubleValue       float64
	StringValue       string
	ByteArrayValue    []uint8
	BoolArrayValue    []bool
	IntegerArrayValue []int64
	DoubleArrayValue  []float64
	StringArrayValue  []string
}

// Parameter is rcl_interfaces/msg/Parameter.
type Parameter struct {
	Name  string
	Value ParameterValue
}

// FloatingPointRange is rcl_interfaces/msg/FloatingPointRange (step 0: any value).
type FloatingPointRange struct {
	FromValue, ToValue, Step float64
}

// IntegerRange is rcl_interfaces/msg/IntegerRange (step 0: any value).
type IntegerRange struct {
	FromValue, ToValue int64
	Step               uint64
}

// ParameterDescriptor is rcl_interfaces/msg/ParameterDescriptor; each range
// holds at most one element.
type ParameterDescriptor struct {
	Name                  string
	Type                  uint8
	Description           string
	AdditionalConstraints string
	ReadOnly              bool
	DynamicTyping         bool
	FloatingPointRange    []FloatingPointRange
	IntegerRange          []IntegerRange
}

// ParameterEvent is rcl_interfaces/msg/ParameterEvent, the message of
// /parameter_events.
type ParameterEvent struct {
	Stamp             time.Time
	Node              string
	NewParameters     []Parameter
	ChangedParameters []Parameter
	DeletedParameters []Parameter
}

// SetParametersResult is rcl_interfaces/msg/SetParametersResult.
type SetParametersResult struct {
	Successful bool
	Reason     string
}

// ListParametersResult is rcl_interfaces/msg/ListParametersResult.
type ListParametersResult struct {
	Names    []string
	Prefixes []string
}

// Log is rcl_interfaces/msg/Log, the message of /rosout.
type Log struct {
	Stamp    time.Time
	Level    uint8
	Name     string
	Msg      string
	File     string
	Function string
	Line     uint32
}

// The parameter services' requests and responses (rcl_interfaces/srv/*).
type (
	DescribeParametersRequest  struct{ Names []string }
	DescribeParametersResponse struct{ Descriptors []ParameterDescriptor }
	GetParameterTypesRequest   struct{ Names []string }
	GetParameterTypesResponse  struct{ Types []uint8 }
	GetParametersRequest       struct{ Names []string }
	GetParametersResponse      struct{ Values []ParameterValue }
	ListParametersRequest      struct {
		Prefixes []string
		Depth    uint64
	}
	ListParametersResponse          struct{ Result ListParametersResult }
	SetParametersRequest            struct{ Parameters []Parameter }
	SetParametersResponse           struct{ Results []SetParametersResult }
	SetParametersAtomicallyRequest  struct{ Parameters []Parameter }
	SetParametersAtomicallyResponse struct{ Result SetParametersResult }
)

// The parameter services' type names.
const (
	DescribeParametersSrv      = "rcl_interfaces/srv/DescribeParameters"
	GetParameterTypesSrv       = "rcl_interfaces/srv/GetParameterTypes"
	GetParametersSrv           = "rcl_interfaces/srv/GetParameters"
	ListParametersSrv          = "rcl_interfaces/srv/ListParameters"
	SetParametersSrv           = "rcl_interfaces/srv/SetParameters"
	SetParametersAtomicallySrv = "rcl_interfaces/srv/SetParametersAtomically"
)

// addRclInterfaces describes rcl_interfaces' parameter and log types; tm is
// builtin_interfaces/msg/Time.
func addRclInterfaces(c *catalog, add func(any, *typeDesc) *typeDesc, tm *typeDesc) {
	value := add(ParameterValue{}, &typeDesc{name: "rcl_interfaces/msg/ParameterValue", fields: []field{
		prim("type", tUint8), prim("bool_value", tBool), prim("integer_value", tInt64),
		prim("double_value", tFloat64), prim("string_value", tString), seqOf(prim("byte_array_value", tByte)),
		seqOf(prim("bool_array_value", tBool)), seqOf(prim("integer_array_value", tInt64)),
		seqOf(prim("double_array_value", tFloat64)), seqOf(prim("string_array_value", tString))}})
	param := add(Parameter{}, &typeDesc{name: "rcl_interfaces/msg/Parameter", fields: []field{
		prim("name", tString), nest("value", value)}})
	fpr := add(FloatingPointRange{}, &typeDesc{name: "rcl_interfaces/msg/FloatingPointRange", fields: []field{
		prim("from_value", tFloat64), prim("to_value", tFloat64), prim("step", tFloat64)}})
	ir := add(IntegerRange{}, &typeDesc{name: "rcl_interfaces/msg/IntegerRange", fields: []field{
		prim("from_value", tInt64), prim("to_value", tInt64), prim("step", tUint64)}})
	desc := add(ParameterDescriptor{}, &typeDesc{name: "rcl_interfaces/msg/ParameterDescriptor", fields: []field{
		prim("name", tString), prim("type", tUint8), prim("description", tString),
		prim("additional_constraints", tString), prim("read_only", tBool), prim("dynamic_typing", tBool),
		boundedSeqOf(nest("floating_point_range", fpr), 1), boundedSeqOf(nest("integer_range", ir), 1)}})
	add(ParameterEvent{}, &typeDesc{name: "rcl_interfaces/msg/ParameterEvent", fields: []field{
		nest("stamp", tm), prim("node", tString), seqOf(nest("new_parameters", param)),
		seqOf(nest("changed_parameters", param)), seqOf(nest("deleted_parameters", param))}})
	result := add(SetParametersResult{}, &typeDesc{name: "rcl_interfaces/msg/SetParametersResult", fields: []field{
		prim("successful", tBool), prim("reason", tString)}})
	list := add(ListParametersResult{}, &typeDesc{name: "rcl_interfaces/msg/ListParametersResult", fields: []field{
		seqOf(prim("names", tString)), seqOf(prim("prefixes", tString))}})
	add(Log{}, &typeDesc{name: "rcl_interfaces/msg/Log",
		consts: []constant{{"uint8", "DEBUG", "10"}, {"uint8", "INFO", "20"}, {"uint8", "WARN", "30"},
			{"uint8", "ERROR", "40"}, {"uint8", "FATAL", "50"}},
		fields: []field{nest("stamp", tm), prim("level", tUint8), prim("name", tString), prim("msg", tString),
			prim("file", tString), prim("function", tString), prim("line", tUint32)}})

	names := func(n string) *typeDesc {
		return &typeDesc{name: n, fields: []field{seqOf(prim("names", tString))}}
	}
	svc := func(name string, reqGo any, req *typeDesc, respGo any, resp *typeDesc) {
		serviceDesc(c, name, add(reqGo, req), add(respGo, resp), tm)
	}
	svc(DescribeParametersSrv, DescribeParametersRequest{}, names(DescribeParametersSrv+"_Request"),
		DescribeParametersResponse{}, &typeDesc{name: DescribeParametersSrv + "_Response", fields: []field{
			seqOf(nest("descriptors", desc))}})
	svc(GetParameterTypesSrv, GetParameterTypesRequest{}, names(GetParameterTypesSrv+"_Request"),
		GetParameterTypesResponse{}, &typeDesc{name: GetParameterTypesSrv + "_Response", fields: []field{
			seqOf(prim("types", tUint8))}})
	svc(GetParametersSrv, GetParametersRequest{}, names(GetParametersSrv+"_Request"),
		GetParametersResponse{}, &typeDesc{name: GetParametersSrv + "_Response", fields: []field{
			seqOf(nest("values", value))}})
	svc(ListParametersSrv, ListParametersRequest{}, &typeDesc{name: ListParametersSrv + "_Request",
		consts: []constant{{"uint64", "DEPTH_RECURSIVE", "0"}},
		fields: []field{seqOf(prim("prefixes", tString)), prim("depth", tUint64)}},
		ListParametersResponse{}, &typeDesc{name: ListParametersSrv + "_Response", fields: []field{
			nest("result", list)}})
	svc(SetParametersSrv, SetParametersRequest{}, &typeDesc{name: SetParametersSrv + "_Request", fields: []field{
		seqOf(nest("parameters", param))}},
		SetParametersResponse{}, &typeDesc{name: SetParametersSrv + "_Response", fields: []field{
			seqOf(nest("results", result))}})
	svc(SetParametersAtomicallySrv, SetParametersAtomicallyRequest{}, &typeDesc{name: SetParametersAtomicallySrv + "_Request", fields: []field{
		seqOf(nest("parameters", param))}},
		SetParametersAtomicallyResponse{}, &typeDesc{name: SetParametersAtomicallySrv + "_Response", fields: []field{
			nest("result", result)}})
}

// ServiceByName describes a service type this package knows
// ("rcl_interfaces/srv/GetParameters", "std_srvs/srv/Trigger").
func ServiceByName(name string) (ServiceType, error) {
	r, err := theRegistry()
	if err != nil {
		return ServiceType{}, err
	}
	srv, ok := r.cat.byName[name]
	if !ok || len(srv.fields) != 3 || srv.fields[2].name != "event_message" {
		return ServiceType{}, fmt.Errorf("cdr: %s is not a service type this package knows", name)
	}
	return r.service(srv), nil
}
