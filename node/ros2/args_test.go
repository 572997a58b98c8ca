package ros2

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParseArgsNamesAndRemaps(t *testing.T) {
	a, rest, err := ParseArgs([]string{
		"node", "--device", "cpu",
		"--ros-args", "-r", "__node:=mapper", "-r", "__ns:=/robot", "-r", "image:=/camera/color/image_raw",
		"-r", "other:~/pose:=/nope", "--remap", "mapper:~/cloud:=points", "--log-level", "debug", "--",
		"--weights", "w.safetensors",
	}, env(nil), "lingbotmap")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rest, " "); got != "node --device cpu --weights w.safetensors" {
		t.Errorf("rest = %q", got)
	}
	if a.FullName() != "/robot/mapper" {
		t.Errorf("FullName = %q", a.FullName())
	}
	for name, want := range map[string]string{
		"image":        "/camera/color/image_raw",
		"~/pose":       "/robot/mapper/pose", // the rule for node "other" does not apply
		"~/cloud":      "/robot/points",
		"~cloud":       "/robot/points", // ROS 1 spelling, as the node core writes private names
		"/tf":          "/tf",
		"depth":        "/robot/depth",
		"~":            "/robot/mapper",
		"{node}/debug": "/robot/mapper/debug",
	} {
		if got := a.Resolve(name); got != want {
			t.Errorf("Resolve(%q) = %q, want %q", name, got, want)
		}
	}
	if topicName("/robot/mapper/pose") != "rt/robot/mapper/pose" ||
		requestTopic("/robot/mapper/save_map") != "rq/robot/mapper/save_mapRequest" ||
		replyTopic("/robot/mapper/save_map") != "rr/robot/mapper/save_mapReply" {
		t.Error("DDS topic names do not follow rt/, rq/…Request, rr/…Reply")
	}
}

func TestParseArgsErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--ros-args", "-r"}, nil, "needs a value"},
		{[]string{"--ros-args", "-r", "a"}, nil, "want from:=to"},
		{[]string{"--ros-args", "-p", "novalue"}, nil, "want name:=value"},
		{[]string{"--ros-args", "--bogus"}, nil, "unknown argument"},
		{[]string{"--ros-args", "-r", "__ns:=relative"}, nil, "must be absolute"},
		{[]string{"--ros-args", "-r", "__node:=a/b"}, nil, "base name"},
		{[]string{"--ros-args", "--params-file", "/nonexistent.yaml"}, nil, "--params-file"},
		{nil, map[string]string{"ROS_DOMAIN_ID": "300"}, "ROS_DOMAIN_ID"},
		{nil, map[string]string{"ROS_DOMAIN_ID": "x"}, "ROS_DOMAIN_ID"},
		{nil, map[string]string{"ROS_AUTOMATIC_DISCOVERY_RANGE": "PLANET"}, "ROS_AUTOMATIC_DISCOVERY_RANGE"},
	} {
		_, _, err := ParseArgs(c.args, env(c.env), "lingbotmap")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseArgs(%q, %v) = %v, want an error with %q", c.args, c.env, err, c.want)
		}
	}
}

func TestParseArgsEnvironment(t *testing.T) {
	for _, c := range []struct {
		env   map[string]string
		want  DiscoveryRange
		dom   uint32
		peers int
	}{
		{nil, DiscoverySubnet, 0, 0},
		{map[string]string{"ROS_LOCALHOST_ONLY": "1", "ROS_DOMAIN_ID": "42"}, DiscoveryLocalhost, 42, 0},
		{map[string]string{"ROS_LOCALHOST_ONLY": "1", "ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET"}, DiscoverySubnet, 0, 0},
		{map[string]string{"ROS_AUTOMATIC_DISCOVERY_RANGE": "off"}, DiscoveryOff, 0, 0},
		{map[string]string{"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "ROS_STATIC_PEERS": "10.0.0.2; robot.local"}, DiscoveryLocalhost, 0, 2},
	} {
		a, _, err := ParseArgs(nil, env(c.env), "lingbotmap")
		if err != nil {
			t.Fatal(err)
		}
		if a.Discovery != c.want || a.Domain != c.dom || len(a.StaticPeers) != c.peers {
			t.Errorf("%v: range %d domain %d peers %q", c.env, a.Discovery, a.Domain, a.StaticPeers)
		}
	}
}

func TestCycloneConfig(t *testing.T) {
	if got := cycloneConfig(DiscoverySubnet, nil, 7, ""); got != "" {
		t.Errorf("SUBNET without peers = %q, want Cyclone's defaults", got)
	}
	if got := cycloneConfig(DiscoverySystemDefault, []string{"x"}, 7, "file:///c.xml"); got != "file:///c.xml" {
		t.Errorf("SYSTEM_DEFAULT = %q", got)
	}
	lo := cycloneConfig(DiscoveryLocalhost, []string{"a&b"}, 7, "file:///c.xml")
	for _, want := range []string{`<NetworkInterface address="127.0.0.1"/>`, "<AllowMulticast>false</AllowMulticast>",
		`<Peer address="localhost"/>`, `<Peer address="a&amp;b"/>`, ",file:///c.xml"} {
		if !strings.Contains(lo, want) {
			t.Errorf("LOCALHOST config lacks %s:\n%s", want, lo)
		}
	}
	off := cycloneConfig(DiscoveryOff, nil, 7, "")
	if !strings.Contains(off, "<Tag>ros_discovery_off_7</Tag>") || !strings.Contains(off, "<AllowMulticast>false") {
		t.Errorf("OFF config = %s", off)
	}
}

func TestParams(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "params.yaml")
	yaml := `
/**:
  ros__parameters:
    queue_policy: drop_oldest
    engine:
      weights: /models/all.safetensors
      keyframe_interval: 4
/robot/other:
  ros__parameters:
    queue_policy: wrong_node
/**/lingbotmap:
  ros__parameters:
    engine.weights: /models/mine.safetensors
    window_frames: [4, 11, 17]
    use_flow: true
    scale: 1.5
`
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	a, _, err := ParseArgs([]string{"--ros-args", "-r", "__ns:=/robot", "--params-file", file,
		"-p", "engine.keyframe_interval:=8", "-p", "other:scale:=9.0", "-p", "name:=hello"}, env(nil), "lingbotmap")
	if err != nil {
		t.Fatal(err)
	}
	p := a.Params
	str := func(k string) string {
		s, err := p.String(k)
		if err != nil {
			t.Errorf("String(%s): %v", k, err)
		}
		return s
	}
	if got := str("queue_policy"); got != "drop_oldest" {
		t.Errorf("queue_policy = %q", got)
	}
	if got := str("~engine/weights"); got != "/models/mine.safetensors" {
		t.Errorf("engine.weights by its ROS 1 name = %q", got)
	}
	if got := str("window_frames"); got != "4 11 17" {
		t.Errorf("window_frames = %q", got)
	}
	if got := str("name"); got != "hello" {
		t.Errorf("name = %q", got)
	}
	if i, err := p.Int("engine.keyframe_interval"); err != nil || i != 8 {
		t.Errorf("keyframe_interval = %d, %v; want 8 from -p", i, err)
	}
	if b, err := p.Bool("use_flow"); err != nil || !b {
		t.Errorf("use_flow = %v, %v", b, err)
	}
	if f, err := p.Float64("scale"); err != nil || f != 1.5 {
		t.Errorf("scale = %v, %v; a -p for another node must not apply", f, err)
	}
	if p.ParamName("~engine/weights") != "engine.weights" {
		t.Errorf("ParamName = %q", p.ParamName("~engine/weights"))
	}
	if set, _ := p.IsSet("engine.missing"); set {
		t.Error("an unset key is set")
	}
	if _, err := p.Int("queue_policy"); err == nil {
		t.Error("a string read as an integer")
	}
	if _, err := p.Bool("missing"); err == nil {
		t.Error("a missing key read without error")
	}
}

func TestParamsFileErrors(t *testing.T) {
	for _, body := range []string{"- a\n- b\n", "/**:\n  params: {a: 1}\n", "/**:\n  ros__parameters: [1]\n", "/**:\n  ros__parameters:\n    a: {b: [[1]]}\n", ":\n  - ["} {
		file := filepath.Join(t.TempDir(), "p.yaml")
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ParseArgs([]string{"--ros-args", "--params-file", file}, env(nil), "lingbotmap"); err == nil {
			t.Errorf("params file %q accepted", body)
		}
	}
}

func TestMatchNode(t *testing.T) {
	for _, c := range []struct {
		pat, name string
		want      bool
	}{
		{"/**", "/a/b", true}, {"lingbotmap", "/lingbotmap", true}, {"lingbotmap", "/ns/lingbotmap", false},
		{"/*/lingbotmap", "/ns/lingbotmap", true}, {"/**/lingbotmap", "/lingbotmap", true},
		{"/ns/*", "/ns/x/y", false}, {"/ns/**", "/ns/x/y", true},
	} {
		if got := matchNode(c.pat, c.name); got != c.want {
			t.Errorf("matchNode(%q, %q) = %v", c.pat, c.name, got)
		}
	}
}

func TestRequestHeaderFraming(t *testing.T) {
	body := []byte{0, 1, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 'o', 'k', 0}
	framed, err := joinRequest(requestHeader{Client: 0x0102030405060708, Seq: 9}, body)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{0, 1, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1, 9, 0, 0, 0, 0, 0, 0, 0}
	if string(framed[:20]) != string(want) || string(framed[20:]) != string(body[4:]) {
		t.Fatalf("framed = % x", framed)
	}
	h, back, err := splitRequest(framed)
	if err != nil || h.Client != 0x0102030405060708 || h.Seq != 9 || string(back) != string(body) {
		t.Fatalf("splitRequest = %+v % x %v", h, back, err)
	}
	if _, _, err := splitRequest(framed[:19]); err == nil {
		t.Error("a truncated request was accepted")
	}
	if _, _, err := splitRequest(append([]byte{0, 7, 0, 0}, framed[4:]...)); err == nil {
		t.Error("an unknown encapsulation was accepted")
	}
	if _, err := joinRequest(requestHeader{}, []byte{0, 0, 0, 0}); err == nil {
		t.Error("a big-endian body was accepted")
	}
}
