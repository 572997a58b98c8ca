package ros2

import (
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/config"
	"github.com/lingbotmap/lingbotmap/msgs/cdr"
	"github.com/lingbotmap/lingbotmap/node"
)

type fakeHost struct{ params []node.LiveParam }

func (f *fakeHost) LiveParams() []node.LiveParam   { return f.params }
func (f *fakeHost) SetParams(map[string]any) error { return nil }
func (f *fakeHost) Refused(string, error)          {}

func float(x float64) *float64 { return &x }

// The answers of the read-only services, as rclcpp gives them.
func TestParamServerAnswers(t *testing.T) {
	h := &fakeHost{params: []node.LiveParam{
		{Key: "map_rate", Value: 1.5, Meta: config.Meta{Description: "rate", Positive: true, Dynamic: true}},
		{Key: "queue_size", Value: int64(4), Meta: config.Meta{Min: float(1)}},
		{Key: "conf_threshold", Value: 1.5, Meta: config.Meta{Min: float(0), Max: float(10), Dynamic: true}},
		{Key: "cuda.pdl", Value: true},
		{Key: "cuda.sub.deep", Value: "x"},
		{Key: "selected_layers", Value: []int64{4, 11}},
	}}
	a, _, err := ParseArgs([]string{"--ros-args", "-p", "use_sim_time:=true"}, func(string) string { return "" }, "lbm")
	if err != nil {
		t.Fatal(err)
	}
	ps := &paramServer{t: &Transport{args: a, log: slog.New(slog.DiscardHandler)}, h: h, simTime: true}

	list := func(depth uint64, prefixes ...string) cdr.ListParametersResult {
		return ps.list(&cdr.ListParametersRequest{Prefixes: prefixes, Depth: depth}).Result
	}
	all := list(0)
	if !slices.Equal(all.Names, []string{"map_rate", "queue_size", "conf_threshold", "cuda.pdl", "cuda.sub.deep", "selected_layers", "use_sim_time"}) ||
		!slices.Equal(all.Prefixes, []string{"cuda", "cuda.sub"}) {
		t.Errorf("list: %+v", all)
	}
	if r := list(1); slices.Contains(r.Names, "cuda.pdl") || !slices.Contains(r.Names, "map_rate") {
		t.Errorf("list depth 1: %+v", r)
	}
	if r := list(1, "cuda"); !slices.Equal(r.Names, []string{"cuda.pdl"}) {
		t.Errorf("list cuda depth 1: %+v", r)
	}
	if r := list(0, "cuda"); !slices.Equal(r.Names, []string{"cuda.pdl", "cuda.sub.deep"}) {
		t.Errorf("list cuda: %+v", r)
	}

	got := ps.get(&cdr.GetParametersRequest{Names: []string{"map_rate", "selected_layers", "use_sim_time", "nope"}}).Values
	if len(got) != 4 || got[0].DoubleValue != 1.5 || got[0].Type != cdr.ParameterDouble ||
		!slices.Equal(got[1].IntegerArrayValue, []int64{4, 11}) || got[1].Type != cdr.ParameterIntegerArray ||
		!got[2].BoolValue || got[3].Type != cdr.ParameterNotSet {
		t.Errorf("get: %+v", got)
	}
	types := ps.types(&cdr.GetParameterTypesRequest{Names: []string{"queue_size", "cuda.pdl", "nope"}}).Types
	if !slices.Equal(types, []uint8{cdr.ParameterInteger, cdr.ParameterBool, cdr.ParameterNotSet}) {
		t.Errorf("types: %v", types)
	}

	d := ps.describe(&cdr.DescribeParametersRequest{Names: []string{"map_rate", "queue_size", "conf_threshold", "use_sim_time"}}).Descriptors
	if len(d) != 4 {
		t.Fatalf("describe: %+v", d)
	}
	if d[0].ReadOnly || d[0].AdditionalConstraints != "> 0" || d[0].Description != "rate" || len(d[0].FloatingPointRange) != 0 {
		t.Errorf("map_rate: %+v", d[0])
	}
	if !d[1].ReadOnly || len(d[1].IntegerRange) != 1 || d[1].IntegerRange[0] != (cdr.IntegerRange{FromValue: 1, ToValue: math.MaxInt64}) {
		t.Errorf("queue_size: %+v", d[1])
	}
	if len(d[2].FloatingPointRange) != 1 || d[2].FloatingPointRange[0] != (cdr.FloatingPointRange{FromValue: 0, ToValue: 10}) {
		t.Errorf("conf_threshold: %+v", d[2])
	}
	if d[3].ReadOnly || d[3].Type != cdr.ParameterBool || !strings.Contains(d[3].Description, "rclcpp") {
		t.Errorf("use_sim_time: %+v", d[3])
	}
	// rclcpp answers nothing when one name is not declared
	if d := ps.describe(&cdr.DescribeParametersRequest{Names: []string{"map_rate", "nope"}}).Descriptors; len(d) != 0 {
		t.Errorf("describe with an unknown name: %+v", d)
	}

	// every type a request may carry unwraps; an unknown one is an error
	for _, v := range []cdr.ParameterValue{{Type: cdr.ParameterByteArray, ByteArrayValue: []byte{1}},
		{Type: cdr.ParameterStringArray, StringArrayValue: []string{"a"}}, {Type: cdr.ParameterDoubleArray}} {
		if _, err := fromParameterValue(v); err != nil {
			t.Errorf("type %d: %v", v.Type, err)
		}
	}
	if _, err := fromParameterValue(cdr.ParameterValue{Type: 42}); err == nil || !strings.Contains(err.Error(), "42") {
		t.Errorf("type 42: %v", err)
	}
	// a typed list keeps its values in the parameters the node reads
	if err := a.Params.set("layers", []bool{true}); err != nil {
		t.Error(err)
	}
}
