package ros1

import (
	"strings"
	"testing"
)

// roslaunch and command-line arguments with the ROS environment are outside
// input.

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
