package ros1

import "testing"

func TestParseROSEnv(t *testing.T) {
	env := map[string]string{
		"ROS_MASTER_URI": "http://10.0.0.5:11411/",
		"ROS_IP":         "10.0.0.7",
		"ROS_NAMESPACE":  "/robot/",
	}
	e, rest, err := ParseROSEnv([]string{
		"--queue_policy=all", "image:=/camera/rgb", "~cloud:=/points", "__name:=mapper",
		"__log:=/tmp/x.log", "_rate:=5", "extra",
	}, func(k string) string { return env[k] }, "lingbotmap")
	if err != nil {
		t.Fatal(err)
	}
	if e.MasterAddress != "10.0.0.5:11411" || e.Host != "10.0.0.7" || e.Namespace != "/robot" || e.Name != "mapper" || e.LogFile != "/tmp/x.log" {
		t.Errorf("ParseROSEnv = %+v", e)
	}
	if len(rest) != 2 || rest[0] != "--queue_policy=all" || rest[1] != "extra" {
		t.Errorf("rest = %q, want the flag and the plain argument", rest)
	}
	for name, want := range map[string]string{
		"image":       "/camera/rgb",
		"~cloud":      "/points",
		"~pose":       "/robot/mapper/pose",
		"camera_info": "/robot/camera_info",
		"/tf":         "/tf",
	} {
		if got := e.Resolve(name); got != want {
			t.Errorf("Resolve(%q) = %q, want %q", name, got, want)
		}
	}
	if e.FullName() != "/robot/mapper" {
		t.Errorf("FullName = %q", e.FullName())
	}
}

func TestParseROSEnvDefaultsAndErrors(t *testing.T) {
	e, _, err := ParseROSEnv(nil, func(string) string { return "" }, "lingbotmap")
	if err != nil {
		t.Fatal(err)
	}
	if e.MasterAddress != "127.0.0.1:11311" || e.Namespace != "/" || e.Resolve("~map") != "/lingbotmap/map" {
		t.Errorf("defaults: %+v, ~map → %s", e, e.Resolve("~map"))
	}
	if _, _, err := ParseROSEnv([]string{"__name:=a/b"}, func(string) string { return "" }, "x"); err == nil {
		t.Error("a node name with a slash was accepted")
	}
	if _, _, err := ParseROSEnv(nil, func(k string) string {
		if k == "ROS_MASTER_URI" {
			return "not a uri"
		}
		return ""
	}, "x"); err == nil {
		t.Error("a bad ROS_MASTER_URI was accepted")
	}
}
