package cdr

import (
	"reflect"
	"testing"
	"time"
)

// rclInterfacesHashes are the REP 2011 hashes the real ROS 2 Jazzy of
// ../shared/tools/ros2-jazzy installs with rcl_interfaces
// (share/rcl_interfaces/{msg,srv}/*.json, "type_hashes", written by
// rosidl_generator_type_description); test/params_jazzy_test.go also reads
// /parameter_events' and /rosout's from `ros2 topic info -v`.
var rclInterfacesHashes = map[string]string{
	"rcl_interfaces/msg/FloatingPointRange":               "RIHS01_e6af23a23c177fee5f3075c8b1e435162a9b63c863d78c06017460b49684262d",
	"rcl_interfaces/msg/IntegerRange":                     "RIHS01_f7b7fdc0f65f07702e099218e13288c3963bcb9345bde78b560e6cd19800fc5a",
	"rcl_interfaces/msg/ListParametersResult":             "RIHS01_237ae3428413dcbcfb452b510c42355f3a2b021dc091afa3e18526d57022f1cd",
	"rcl_interfaces/msg/Log":                              "RIHS01_e28ce254ca8abc06abf92773b74602cdbf116ed34fbaf294fb9f81da9f318eac",
	"rcl_interfaces/msg/Parameter":                        "RIHS01_ddfe6442cffc462317adb5c92536a7b6dd55858c5c3e1e328165a6b73c2831af",
	"rcl_interfaces/msg/ParameterDescriptor":              "RIHS01_52175dbfda6c51153101d33d2a9da05743f66f02d5ab2ca9ec4709b46b73d704",
	"rcl_interfaces/msg/ParameterEvent":                   "RIHS01_043e627780fcad87a22d225bc2a037361dba713fca6a6b9f4b869a5aa0393204",
	"rcl_interfaces/msg/ParameterValue":                   "RIHS01_115fc089a387e23c7ecd3525c9189c379109119d6ab82e8dfbde0fdf6a7f9b68",
	"rcl_interfaces/msg/SetParametersResult":              "RIHS01_cfcc0fb0371ee5159b403960ef4300f8f9d2f1fd6117c8666b7f9654d528a9b1",
	"rcl_interfaces/srv/DescribeParameters":               "RIHS01_845b484d71eb0673dae682f2e3ba3c4851a65a3dcfb97bddd82c5b57e91e4cff",
	"rcl_interfaces/srv/DescribeParameters_Event":         "RIHS01_3deba64c035093033c690184834441551a53128ea2539f71f2596fbc4ed9de43",
	"rcl_interfaces/srv/DescribeParameters_Request":       "RIHS01_05dd1c2bc87dec2627105c8070d6f9725c781a4f2ab852975bf105462b82b644",
	"rcl_interfaces/srv/DescribeParameters_Response":      "RIHS01_ad6747319613c6131589e062e095b469a46cc764f7d0f12a001a49e6cd893995",
	"rcl_interfaces/srv/GetParameterTypes":                "RIHS01_da199c878688b3e530bdfe3ca8f74cb9fa0c303101e980a9e8f260e25e1c80ca",
	"rcl_interfaces/srv/GetParameterTypes_Event":          "RIHS01_9516adca0cc885d46a59c2362fb8eb5f4906b046518266f8c645b454b0dddc60",
	"rcl_interfaces/srv/GetParameterTypes_Request":        "RIHS01_87d7ec5ef545d4daa289d500025d31fb2437bc8b8365ca367161c4dac4be33fd",
	"rcl_interfaces/srv/GetParameterTypes_Response":       "RIHS01_ac1335dce67c478e669434f6ac2fbff34fcd529580f272d3006785ba8b54e47f",
	"rcl_interfaces/srv/GetParameters":                    "RIHS01_bf9803d5c74cf989a5de3e0c2e99444599a627c7ff75f97b8c05b01003675cbc",
	"rcl_interfaces/srv/GetParameters_Event":              "RIHS01_84eeb9247b09067c35bd8750d5c8555b700e394a616737c4624f15ae02e64c4d",
	"rcl_interfaces/srv/GetParameters_Request":            "RIHS01_135a9e1c3d7cebef792f6687d7ddf99949b21a0bd9a320d863a9110a3f5cf4d6",
	"rcl_interfaces/srv/GetParameters_Response":           "RIHS01_9fa773b46e39cc5d02db6224d8fd520bb9caeeffc2b27c96c1e59431baba9f2a",
	"rcl_interfaces/srv/ListParameters":                   "RIHS01_3e6062bfbb27bfb8730d4cef2558221f51a11646d78e7bb30a1e83afac3aad9d",
	"rcl_interfaces/srv/ListParameters_Event":             "RIHS01_89c5b5aaf68ec925ae9bbc5569ee21de82959b4d1496dbd498792ad825b9b292",
	"rcl_interfaces/srv/ListParameters_Request":           "RIHS01_a1b0b5d6b967a5b8ac5bc8563c3ea678f349e312a6a4967227c5a96bc5ce38df",
	"rcl_interfaces/srv/ListParameters_Response":          "RIHS01_31b937b82de3612426be79f231e386259f97e8dc843e3f2845288b4bfa296bdd",
	"rcl_interfaces/srv/SetParameters":                    "RIHS01_56eed9a67e169f9cb6c1f987bc88f868c14a8fc9f743a263bc734c154015d7e0",
	"rcl_interfaces/srv/SetParametersAtomically":          "RIHS01_0e192ef259c07fc3c07a13191d27002222e65e00ccec653ca05e856f79285fcd",
	"rcl_interfaces/srv/SetParametersAtomically_Event":    "RIHS01_42fc0821e6e8fcff2b150cefc7d8269f0ce65139e1dc715b15267a4bcf63a189",
	"rcl_interfaces/srv/SetParametersAtomically_Request":  "RIHS01_db0bd950ed5ed867a0e90b225e44dea382d762c0762ff3e0ee842190042a59e5",
	"rcl_interfaces/srv/SetParametersAtomically_Response": "RIHS01_31b1a38c5b0b9d893ee24da45f69638f4561c78461d82d52750f429b534502b8",
	"rcl_interfaces/srv/SetParameters_Event":              "RIHS01_5060f52369bcff7f9dbd6eca21ee521859e471e71b33a8a8df26d5236fe54a80",
	"rcl_interfaces/srv/SetParameters_Request":            "RIHS01_130d46386b7e84ea9ecf60608a4d83cbe5e5cb7c6cc5b712b7a4e3a6c254e932",
	"rcl_interfaces/srv/SetParameters_Response":           "RIHS01_7a0e8140a0b8d98308fa81a5403a766e610af29a239caf54b7553227906fc266",
}

func TestRclInterfacesHashes(t *testing.T) {
	checkHashes(t, rclInterfacesHashes)
	for _, name := range []string{DescribeParametersSrv, GetParameterTypesSrv, GetParametersSrv,
		ListParametersSrv, SetParametersSrv, SetParametersAtomicallySrv} {
		st, err := ServiceByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Hash != rclInterfacesHashes[name] || st.Request.Hash != rclInterfacesHashes[name+"_Request"] ||
			st.Response.Hash != rclInterfacesHashes[name+"_Response"] {
			t.Errorf("ServiceByName(%s) = %+v", name, st)
		}
		if want := "rcl_interfaces::srv::dds_::" + name[len("rcl_interfaces/srv/"):] + "_Request_"; st.Request.DDSName != want {
			t.Errorf("%s: DDS name %s, want %s", name, st.Request.DDSName, want)
		}
	}
	if _, err := ServiceByName("rcl_interfaces/msg/Log"); err == nil {
		t.Error("ServiceByName accepted a message type")
	}
}

// Every rcl_interfaces value survives Marshal and Unmarshal, including the
// sequences of strings, bools and nested messages and the bounded ranges.
func TestRclInterfacesRoundTrip(t *testing.T) {
	stamp := time.Unix(1700000000, 123456789)
	all := ParameterValue{Type: ParameterStringArray, BoolValue: true, IntegerValue: -7, DoubleValue: 1.5,
		StringValue: "dir", ByteArrayValue: []uint8{0, 255}, BoolArrayValue: []bool{true, false},
		IntegerArrayValue: []int64{4, 11, -17}, DoubleArrayValue: []float64{0.25, -2},
		StringArrayValue: []string{"a", "", "ü"}}
	for _, msg := range []any{
		&all,
		&ParameterEvent{Stamp: stamp, Node: "/lingbotmap",
			NewParameters:     []Parameter{{Name: "use_sim_time", Value: ParameterValue{Type: ParameterBool}}},
			ChangedParameters: []Parameter{{Name: "map_rate", Value: ParameterValue{Type: ParameterDouble, DoubleValue: 4}}},
			DeletedParameters: []Parameter{}},
		&DescribeParametersResponse{Descriptors: []ParameterDescriptor{{Name: "map_rate", Type: ParameterDouble,
			Description: "Most ~map messages per second.", AdditionalConstraints: "> 0",
			FloatingPointRange: []FloatingPointRange{{FromValue: 0.001, ToValue: 1000}}},
			{Name: "queue_size", Type: ParameterInteger, ReadOnly: true,
				IntegerRange: []IntegerRange{{FromValue: 1, ToValue: 1 << 40, Step: 1}}}}},
		&GetParameterTypesResponse{Types: []uint8{ParameterBool, ParameterIntegerArray}},
		&GetParametersRequest{Names: []string{"a", "cuda.pdl"}},
		&ListParametersRequest{Prefixes: []string{"cuda"}, Depth: 2},
		&ListParametersResponse{Result: ListParametersResult{Names: []string{"cuda.pdl"}, Prefixes: []string{"cuda"}}},
		&SetParametersRequest{Parameters: []Parameter{{Name: "save_dir", Value: ParameterValue{Type: ParameterString, StringValue: "/tmp/m"}}}},
		&SetParametersResponse{Results: []SetParametersResult{{Successful: false, Reason: "read-only"}, {Successful: true}}},
		&SetParametersAtomicallyResponse{Result: SetParametersResult{Successful: true}},
		&Log{Stamp: stamp, Level: LogWarn, Name: "lingbotmap", Msg: "frame dropped", File: "node.go", Function: "node.(*Node).Run", Line: 42},
	} {
		b, err := Marshal(msg)
		if err != nil {
			t.Fatalf("%T: %v", msg, err)
		}
		got := reflect.New(reflect.TypeOf(msg).Elem()).Interface()
		if err := Unmarshal(b, got); err != nil {
			t.Fatalf("%T: %v", msg, err)
		}
		if !reflect.DeepEqual(normalizeEmpty(got), normalizeEmpty(msg)) {
			t.Errorf("%T: got %+v, want %+v", msg, got, msg)
		}
		// A truncated message is an error, never a panic.
		for n := 4; n < len(b); n += max(1, len(b)/7) {
			if err := Unmarshal(b[:n], got); err == nil && n < len(b)-3 {
				// trailing padding may be cut without loss; the rest may not
				t.Errorf("%T: %d of %d bytes decoded without error", msg, n, len(b))
			}
		}
	}
	// A range over its bound of one is refused.
	if _, err := Marshal(&ParameterDescriptor{IntegerRange: make([]IntegerRange, 2)}); err == nil {
		t.Error("two integer ranges encoded")
	}
}

// normalizeEmpty makes empty and nil slices equal for the comparison.
func normalizeEmpty(v any) any {
	var walk func(reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if !v.IsNil() {
				walk(v.Elem())
			}
		case reflect.Struct:
			for i := range v.NumField() {
				if v.Field(i).CanSet() {
					walk(v.Field(i))
				}
			}
		case reflect.Slice:
			if v.Len() == 0 {
				v.Set(reflect.Zero(v.Type()))
				return
			}
			for i := range v.Len() {
				walk(v.Index(i))
			}
		}
	}
	walk(reflect.ValueOf(v))
	return v
}
