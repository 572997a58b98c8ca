package ros2

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Args is what a ROS 2 node learns from its command line (the part between
// --ros-args and -- or the end) and from its environment.
type Args struct {
	// Name is the node's base name (-r __node:=name), e.g. "lingbotmap".
	Name string
	// Namespace is absolute, "/" for the root (-r __ns:=/ns).
	Namespace string
	// Remaps are the -r from:=to rules in the order given; the first whose
	// source matches a name applies, as in rcl.
	Remaps []Remap
	// Params are the parameters from --params-file and -p, later ones
	// overriding earlier ones.
	Params *Params
	// Domain is ROS_DOMAIN_ID (default 0).
	Domain uint32
	// Discovery is ROS_AUTOMATIC_DISCOVERY_RANGE (or ROS_LOCALHOST_ONLY=1).
	Discovery DiscoveryRange
	// StaticPeers are ROS_STATIC_PEERS, separated by ';'.
	StaticPeers []string
	// Distro is ROS_DISTRO ("jazzy"); it picks the Gid size of
	// ros_discovery_info unless GidSize is set.
	Distro string
	// GidSize, when not 0, is the Gid size (16 or 24 bytes) the node writes
	// ros_discovery_info with (the ros2_gid_size setting).
	GidSize int
	// Log is what --log-level and rcl's logging switches ask.
	Log LogArgs
}

// LogArgs are rcl's logging arguments.
type LogArgs struct {
	// Level is --log-level LEVEL ("" when not given); Levels holds the
	// --log-level NAME:=LEVEL of single loggers.
	Level  string
	Levels map[string]string
	// Rosout and Stdout switch /rosout and the console off
	// (--disable-rosout-logs, --disable-stdout-logs); both default to on.
	Rosout, Stdout bool
}

// Remap is one -r rule; Node restricts it to one node ("node:from:=to").
type Remap struct {
	Node, From, To string
}

// ParseArgs reads the ROS 2 arguments in args (every --ros-args section) and
// the ROS_* variables through getenv, and returns the other arguments for
// the flag parser. defaultName is the node's name without __node.
func ParseArgs(args []string, getenv func(string) string, defaultName string) (Args, []string, error) {
	a := Args{Name: defaultName, Namespace: "/", Params: newParams(),
		Log: LogArgs{Levels: map[string]string{}, Rosout: true, Stdout: true}}
	var rest []string
	// Parameters are applied once the node's name is known, in the order given.
	type paramStep struct {
		file, key, value string
		isFile           bool
	}
	var steps []paramStep
	in := false
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if !in {
			if arg == "--ros-args" {
				in = true
			} else {
				rest = append(rest, arg)
			}
			continue
		}
		next := func() (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("--ros-args: %s needs a value", arg)
			}
			i++
			return args[i], nil
		}
		switch {
		case arg == "--":
			in = false
		case arg == "--ros-args":
		case arg == "-r" || arg == "--remap":
			v, err := next()
			if err != nil {
				return a, nil, err
			}
			if err := a.addRemap(v); err != nil {
				return a, nil, err
			}
		case arg == "-p" || arg == "--param":
			v, err := next()
			if err != nil {
				return a, nil, err
			}
			key, val, ok := strings.Cut(v, ":=")
			if !ok || key == "" {
				return a, nil, fmt.Errorf("--ros-args -p %q: want name:=value", v)
			}
			steps = append(steps, paramStep{key: key, value: val})
		case arg == "--params-file":
			v, err := next()
			if err != nil {
				return a, nil, err
			}
			steps = append(steps, paramStep{file: v, isFile: true})
		case arg == "--log-level":
			v, err := next()
			if err != nil {
				return a, nil, err
			}
			name, level, named := strings.Cut(v, ":=")
			if !named {
				name, level = "", v
			}
			if _, err := ParseLogLevel(level); err != nil {
				return a, nil, fmt.Errorf("--ros-args --log-level %s: %w", v, err)
			}
			if named {
				a.Log.Levels[name] = level
			} else {
				a.Log.Level = level
			}
		case arg == "--enclave" || arg == "-e" || arg == "--log-config-file" || arg == "--log-file-name":
			if _, err := next(); err != nil {
				return a, nil, err
			}
		case arg == "--enable-rosout-logs" || arg == "--disable-rosout-logs":
			a.Log.Rosout = arg == "--enable-rosout-logs"
		case arg == "--enable-stdout-logs" || arg == "--disable-stdout-logs":
			a.Log.Stdout = arg == "--enable-stdout-logs"
		case strings.HasPrefix(arg, "--enable-") || strings.HasPrefix(arg, "--disable-"):
			// rcl's other logging switches (external library logs): the node has none.
		default:
			return a, nil, fmt.Errorf("--ros-args: unknown argument %q", arg)
		}
	}
	if a.Name == "" || strings.ContainsAny(a.Name, "/~ ") {
		return a, nil, fmt.Errorf("node name %q must be a non-empty base name without '/', '~' or spaces", a.Name)
	}
	for _, s := range steps {
		if s.isFile {
			b, err := os.ReadFile(s.file)
			if err != nil {
				return a, nil, fmt.Errorf("--params-file: %w", err)
			}
			if err := a.Params.loadYAML(b, a.FullName()); err != nil {
				return a, nil, fmt.Errorf("--params-file %s: %w", s.file, err)
			}
			continue
		}
		key := s.key
		// "node:key" sets a parameter of one node only.
		if n, k, ok := strings.Cut(key, ":"); ok {
			if n != a.Name && n != "*" {
				continue
			}
			key = k
		}
		if err := a.Params.setString(key, s.value); err != nil {
			return a, nil, fmt.Errorf("--ros-args -p %s: %w", key, err)
		}
	}
	if err := a.readEnv(getenv); err != nil {
		return a, nil, err
	}
	return a, rest, nil
}

func (a *Args) addRemap(v string) error {
	from, to, ok := strings.Cut(v, ":=")
	if !ok || from == "" || to == "" {
		return fmt.Errorf("--ros-args -r %q: want from:=to", v)
	}
	var node string
	// "node:from" restricts a rule to one node; "~" and "/" never hold ':'.
	if n, f, ok := strings.Cut(from, ":"); ok {
		node, from = n, f
	}
	switch from {
	case "__node", "__name":
		if node == "" || node == a.Name {
			a.Name = to
		}
	case "__ns":
		if node == "" || node == a.Name {
			if !strings.HasPrefix(to, "/") {
				return fmt.Errorf("--ros-args -r __ns:=%s: the namespace must be absolute", to)
			}
			a.Namespace = cleanNS(to)
		}
	default:
		a.Remaps = append(a.Remaps, Remap{Node: node, From: from, To: to})
	}
	return nil
}

func cleanNS(ns string) string {
	ns = "/" + strings.Trim(ns, "/")
	return ns
}

// DiscoveryRange is how far DDS discovery reaches (ROS_AUTOMATIC_DISCOVERY_RANGE).
type DiscoveryRange int

const (
	// DiscoverySubnet is Cyclone's default multicast discovery.
	DiscoverySubnet DiscoveryRange = iota
	// DiscoveryLocalhost keeps discovery and traffic on this machine.
	DiscoveryLocalhost
	// DiscoveryOff finds no other participant.
	DiscoveryOff
	// DiscoverySystemDefault leaves Cyclone's configuration untouched.
	DiscoverySystemDefault
)

func (a *Args) readEnv(getenv func(string) string) error {
	a.Distro = strings.TrimSpace(getenv("ROS_DISTRO"))
	if v := strings.TrimSpace(getenv("ROS_DOMAIN_ID")); v != "" {
		d, err := strconv.ParseUint(v, 10, 32)
		// 232 is the largest id whose ports fit in 16 bits with Cyclone's defaults.
		if err != nil || d > 232 {
			return fmt.Errorf("ROS_DOMAIN_ID=%q: want an integer from 0 to 232", v)
		}
		a.Domain = uint32(d)
	}
	switch r := strings.ToUpper(strings.TrimSpace(getenv("ROS_AUTOMATIC_DISCOVERY_RANGE"))); r {
	case "", "SUBNET":
		a.Discovery = DiscoverySubnet
		if r == "" && strings.TrimSpace(getenv("ROS_LOCALHOST_ONLY")) == "1" {
			a.Discovery = DiscoveryLocalhost
		}
	case "LOCALHOST":
		a.Discovery = DiscoveryLocalhost
	case "OFF":
		a.Discovery = DiscoveryOff
	case "SYSTEM_DEFAULT":
		a.Discovery = DiscoverySystemDefault
	default:
		return fmt.Errorf("ROS_AUTOMATIC_DISCOVERY_RANGE=%q: want SUBNET, LOCALHOST, OFF or SYSTEM_DEFAULT", r)
	}
	for _, p := range strings.Split(getenv("ROS_STATIC_PEERS"), ";") {
		if p = strings.TrimSpace(p); p != "" {
			a.StaticPeers = append(a.StaticPeers, p)
		}
	}
	return nil
}

// FullName is the node's absolute name, e.g. "/lingbotmap" or "/robot/lingbotmap".
func (a *Args) FullName() string {
	if a.Namespace == "/" {
		return "/" + a.Name
	}
	return a.Namespace + "/" + a.Name
}

// expand makes name absolute the ROS 2 way: "~" is the node, "~/x" is
// private, "x" is in the node's namespace; {node} and {ns} are substituted.
func (a *Args) expand(name string) string {
	name = strings.ReplaceAll(name, "{node}", a.Name)
	name = strings.ReplaceAll(name, "{ns}", strings.TrimPrefix(a.Namespace, "/"))
	switch {
	case name == "~":
		return a.FullName()
	case strings.HasPrefix(name, "~/"):
		return a.FullName() + name[1:]
	case strings.HasPrefix(name, "~"):
		// ROS 1's spelling of a private name ("~pose"), which the node core
		// uses for both transports.
		return a.FullName() + "/" + name[1:]
	case strings.HasPrefix(name, "/"):
		return name
	case a.Namespace == "/":
		return "/" + name
	default:
		return a.Namespace + "/" + name
	}
}

// Resolve expands name and applies the first matching remap rule.
func (a *Args) Resolve(name string) string {
	full := a.expand(name)
	for _, r := range a.Remaps {
		if r.Node != "" && r.Node != a.Name {
			continue
		}
		if a.expand(r.From) == full {
			return a.expand(r.To)
		}
	}
	return full
}

// DDS topic names of a resolved ROS 2 name.
func topicName(name string) string    { return "rt" + name }
func requestTopic(name string) string { return "rq" + name + "Request" }
func replyTopic(name string) string   { return "rr" + name + "Reply" }
