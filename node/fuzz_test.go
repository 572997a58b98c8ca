package node

import (
	"math"
	"strings"
	"testing"
)

// The node's own decoders of outside input: roslaunch/command-line arguments
// with the ROS environment, and the transform and list strings of settings.

func FuzzParseROSEnv(f *testing.F) {
	f.Add("image:=/cam\x00__name:=n\x00__ns:=/a/b/\x00--x=1", "http://127.0.0.1:11311", "/ns", "~pose")
	f.Add("~a:=b\x00__log:=/x\x00:=\x00__name:=", "http://[::1]:1", "", "a/b")
	f.Add("_p:=1\x00__master:=http://h:2", "", "robot", "/tf")
	f.Fuzz(func(t *testing.T, args, master, ns, name string) {
		env := map[string]string{"ROS_MASTER_URI": master, "ROS_NAMESPACE": ns}
		e, rest, err := ParseROSEnv(strings.Split(args, "\x00"), func(k string) string { return env[k] }, "lingbotmap")
		if err != nil {
			return
		}
		if e.MasterAddress == "" || !strings.HasPrefix(e.Namespace, "/") || e.Name == "" {
			t.Fatalf("accepted but incomplete: %+v", e)
		}
		for _, a := range rest {
			if strings.Contains(a, ":=") && !strings.HasPrefix(a, "-") {
				t.Fatalf("remap argument %q left for the flag parser", a)
			}
		}
		if r := e.resolveNoRemap(name); !strings.HasPrefix(r, "/") {
			t.Fatalf("Resolve(%q) = %q is not absolute", name, r)
		}
	})
}

func FuzzParseTransform(f *testing.F) {
	f.Add("0 0 0 -0.5 0.5 -0.5 0.5")
	f.Add("1 2 3 0 0 0 1")
	f.Add("1e308 1 1 1e-300 0 0 0")
	f.Add("  4 5 6   0 0 1 0  ")
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseTransform(s)
		if err != nil {
			return
		}
		// An accepted transform has a proper rotation: RᵀR = I.
		for i := range 3 {
			for j := range 3 {
				var d float64
				for k := range 3 {
					d += m[k][i] * m[k][j]
				}
				want := 0.0
				if i == j {
					want = 1
				}
				if math.Abs(d-want) > 1e-6 || math.IsNaN(d) {
					t.Fatalf("%q gave a rotation that is not orthonormal: %v", s, m)
				}
			}
		}
	})
}

func FuzzParseInts(f *testing.F) {
	f.Add("4 11 17 23")
	f.Add("[0, 2,3 ,4]")
	f.Add("99999999999999999999")
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := parseInts(s); err == nil && len(v) > len(s) {
			t.Fatalf("%q gave %d numbers", s, len(v))
		}
	})
}
