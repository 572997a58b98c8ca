package test

import (
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// ros2 launch and rviz2 cannot run here (ROS 2 is not packaged in Debian 12),
// so these tests read the ROS 2 launch files and the rviz2 config and check
// them against what the node really has: its configuration keys and the
// topics it uses.

// nodeTopics are the names the node subscribes to and publishes (README, "The
// ROS node"), as a remap's "from" may write them.
var nodeTopics = map[string]bool{
	"image": true, "image/compressed": true, "camera_info": true,
	"~/pose": true, "~/path": true, "~/odom": true, "~/cloud": true, "~/map": true, "~/depth": true,
	"pose": true, "path": true, "odom": true, "cloud": true, "map": true, "depth": true,
	"/tf": true, "/tf_static": true, "/diagnostics": true,
}

// launchXML is any element of a launch file.
type launchXML struct {
	XMLName  xml.Name
	Attrs    []xml.Attr  `xml:",any,attr"`
	Children []launchXML `xml:",any"`
}

func (e launchXML) attr(name string) (string, bool) {
	for _, a := range e.Attrs {
		if a.Name.Local == name {
			return a.Value, true
		}
	}
	return "", false
}

// walk calls f for e and every element below it.
func (e launchXML) walk(f func(launchXML)) {
	f(e)
	for _, c := range e.Children {
		c.walk(f)
	}
}

func readLaunch(t *testing.T, name string) launchXML {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "launch", name))
	if err != nil {
		t.Fatal(err)
	}
	var root launchXML
	if err := xml.Unmarshal(b, &root); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if root.XMLName.Local != "launch" {
		t.Fatalf("%s: root element <%s>, want <launch>", name, root.XMLName.Local)
	}
	return root
}

// configKeys flattens config/lingbotmap.yaml into dotted keys (the way ROS 2
// parameters name nested settings) and their default values.
func configKeys(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile("../config/lingbotmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	var flatten func(prefix string, m map[string]any)
	flatten = func(prefix string, m map[string]any) {
		for k, v := range m {
			if sub, ok := v.(map[string]any); ok {
				flatten(prefix+k+".", sub)
				continue
			}
			out[prefix+k] = v
		}
	}
	flatten("", doc)
	if len(out) < 20 {
		t.Fatalf("config/lingbotmap.yaml has only %d keys", len(out))
	}
	return out
}

var varRef = regexp.MustCompile(`\$\(var ([A-Za-z0-9_]+)\)`)

// paramValueFits reports whether value, typed the way ROS 2 types a launch
// parameter (a YAML scalar), can set a setting whose default is def.
func paramValueFits(value string, def any) error {
	var v any
	if err := yaml.Unmarshal([]byte(value), &v); err != nil {
		return fmt.Errorf("value %q is no YAML scalar: %w", value, err)
	}
	switch def.(type) {
	case string:
		if _, ok := v.(string); ok || v == nil {
			return nil
		}
	case int:
		if _, ok := v.(int); ok {
			return nil
		}
	case float64:
		switch v.(type) {
		case int, float64:
			return nil
		}
	case bool:
		if _, ok := v.(bool); ok {
			return nil
		}
	default:
		return fmt.Errorf("the setting's default %v (%T) cannot be set from a launch file", def, def)
	}
	return fmt.Errorf("value %q is a %T in ROS 2, the setting is a %T", value, v, def)
}

// substitute replaces $(var x) by the arg's default,
// $(find-pkg-share lingbotmap) by the repository root and
// $(find-pkg-prefix lingbotmap) by an install prefix (colcon's layout).
func substitute(s string, defaults map[string]string) string {
	s = varRef.ReplaceAllStringFunc(s, func(m string) string { return defaults[varRef.FindStringSubmatch(m)[1]] })
	s = strings.ReplaceAll(s, "$(find-pkg-share lingbotmap)", "..")
	return strings.ReplaceAll(s, "$(find-pkg-prefix lingbotmap)", "/install/lingbotmap")
}

// checkLaunch checks one launch file, and the files it includes, once each;
// it returns the file's args.
func checkLaunch(t *testing.T, name string, keys map[string]any, checked map[string]map[string]string) map[string]string {
	t.Helper()
	if args, ok := checked[name]; ok {
		return args
	}
	root := readLaunch(t, name)
	args := map[string]string{}
	var uses []string // every attribute value except the args' names
	known := map[string]bool{"launch": true, "arg": true, "node": true, "param": true, "remap": true, "executable": true, "include": true}
	root.walk(func(e launchXML) {
		if !known[e.XMLName.Local] {
			t.Errorf("%s: element <%s> is not used by these launch files", name, e.XMLName.Local)
		}
		for _, a := range e.Attrs {
			if !(e.XMLName.Local == "arg" && a.Name.Local == "name") {
				uses = append(uses, a.Value)
			}
		}
	})
	for _, e := range root.Children {
		if e.XMLName.Local == "arg" {
			n, _ := e.attr("name")
			d, _ := e.attr("default")
			args[n] = d
		}
	}
	checked[name] = args
	all := strings.Join(uses, "\n")
	for a := range args {
		if !strings.Contains(all, "$(var "+a+")") {
			t.Errorf("%s: arg %q is never used", name, a)
		}
	}
	for _, m := range varRef.FindAllStringSubmatch(all, -1) {
		if _, ok := args[m[1]]; !ok {
			t.Errorf("%s: $(var %s) names no arg", name, m[1])
		}
	}
	root.walk(func(e launchXML) {
		switch e.XMLName.Local {
		case "node":
			pkg, _ := e.attr("pkg")
			if pkg != "lingbotmap" {
				return
			}
			if exec, _ := e.attr("exec"); exec != "lingbotmap" {
				t.Errorf("%s: the node's exec is %q, want lingbotmap", name, exec)
			}
			if a, _ := e.attr("args"); !strings.HasPrefix(a, "node --ros=2") {
				t.Errorf("%s: the node's args %q do not start the ROS 2 node (node --ros=2)", name, a)
			}
			if cfg := substitute(args["config"], args); args["config"] != "" {
				if _, err := os.Stat(cfg); err != nil {
					t.Errorf("%s: the config file: %v", name, err)
				}
			}
			params := 0
			for _, c := range e.Children {
				switch c.XMLName.Local {
				case "param":
					params++
					key, _ := c.attr("name")
					value, _ := c.attr("value")
					def, ok := keys[key]
					if !ok {
						t.Errorf("%s: <param name=%q> is no key of config/lingbotmap.yaml", name, key)
						continue
					}
					if err := paramValueFits(substitute(value, args), def); err != nil {
						t.Errorf("%s: <param name=%q>: %v", name, key, err)
					}
				case "remap":
					from, _ := c.attr("from")
					if !nodeTopics[from] {
						t.Errorf("%s: <remap from=%q> is no topic of the node", name, from)
					}
				default:
					t.Errorf("%s: <%s> inside the node", name, c.XMLName.Local)
				}
			}
			if params == 0 {
				t.Errorf("%s: the node sets no parameters", name)
			}
		case "include":
			file, _ := e.attr("file")
			inc := strings.TrimPrefix(file, "$(find-pkg-share lingbotmap)/launch/")
			if inc == file {
				t.Errorf("%s: include %q is not a launch file of this package", name, file)
				return
			}
			incArgs := checkLaunch(t, inc, keys, checked)
			for _, c := range e.Children {
				n, _ := c.attr("name")
				if _, ok := incArgs[n]; c.XMLName.Local != "arg" || !ok {
					t.Errorf("%s: <%s name=%q> in the include of %s is no arg there", name, c.XMLName.Local, n, inc)
				}
			}
		case "executable":
			cmd, _ := e.attr("cmd")
			if f := strings.Fields(substitute(cmd, args)); len(f) < 3 || filepath.Base(f[0]) != "lingbotmap" || f[1] != "bag" || f[2] != "play" {
				t.Errorf("%s: <executable cmd=%q> is not `lingbotmap bag play`", name, cmd)
			}
		}
	})
	return args
}

// TestROS2LaunchFiles parses launch/*.launch.xml: every <param> is a real
// setting with a value of its type, every arg is used and every $(var) has
// its arg, every remap renames a topic the node uses, includes pass only
// args the included file declares, and the files they name exist.
func TestROS2LaunchFiles(t *testing.T) {
	keys := configKeys(t)
	checked := map[string]map[string]string{}
	mapping := checkLaunch(t, "mapping.launch.xml", keys, checked)
	for _, a := range []string{"weights", "device", "image", "transport", "queue_policy", "node_name", "namespace", "config"} {
		if _, ok := mapping[a]; !ok {
			t.Errorf("mapping.launch.xml: no arg %q", a)
		}
	}
	replay := checkLaunch(t, "replay.launch.xml", keys, checked)
	if _, ok := replay["bag"]; !ok {
		t.Error("replay.launch.xml: no arg bag")
	}
	if _, err := os.Stat(substitute(replay["rviz_config"], replay)); err != nil {
		t.Errorf("replay.launch.xml: rviz_config: %v", err)
	}
	// The check must notice a wrong file.
	if err := paramValueFits("1.5", "x"); err == nil {
		t.Error("a float accepted for a string setting")
	}
	if err := paramValueFits("fast", 1.0); err == nil {
		t.Error("a string accepted for a float setting")
	}
}

// TestROS2RvizConfig reads launch/lingbotmap_ros2.rviz (rviz2's YAML): rviz2
// display classes, the fixed frame is the default map_frame, and every topic
// of the node it shows exists, the latched ones with transient-local QoS.
func TestROS2RvizConfig(t *testing.T) {
	b, err := os.ReadFile("../launch/lingbotmap_ros2.rviz")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		VM struct {
			Global struct {
				FixedFrame string `yaml:"Fixed Frame"`
			} `yaml:"Global Options"`
			Displays []struct {
				Class string `yaml:"Class"`
				Topic struct {
					Value      string `yaml:"Value"`
					Durability string `yaml:"Durability Policy"`
				} `yaml:"Topic"`
			} `yaml:"Displays"`
		} `yaml:"Visualization Manager"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if def := configKeys(t)["map_frame"]; cfg.VM.Global.FixedFrame != def {
		t.Errorf("fixed frame %q, the node's map_frame is %v", cfg.VM.Global.FixedFrame, def)
	}
	var shown []string
	for _, d := range cfg.VM.Displays {
		if !strings.HasPrefix(d.Class, "rviz_default_plugins/") {
			t.Errorf("display class %q is not an rviz2 one", d.Class)
		}
		topic, ok := strings.CutPrefix(d.Topic.Value, "/lingbotmap/")
		if !ok {
			continue
		}
		shown = append(shown, topic)
		if !nodeTopics[topic] {
			t.Errorf("rviz2 shows %s, which the node does not publish", d.Topic.Value)
		}
		if latched := topic == "map" || topic == "path"; latched != (d.Topic.Durability == "Transient Local") {
			t.Errorf("%s: durability %q (the node's map and path are transient-local, the rest volatile)", d.Topic.Value, d.Topic.Durability)
		}
	}
	sort.Strings(shown)
	if strings.Join(shown, " ") != "cloud depth map path pose" {
		t.Errorf("rviz2 shows the node's %v, want cloud, depth, map, path and pose", shown)
	}
}
