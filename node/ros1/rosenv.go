package ros1

import (
	"fmt"
	"net/url"
	"strings"
)

// ROSEnv is what a ROS 1 node learns from its environment and its `x:=y`
// command-line arguments. goroslib reads only ROS_NAMESPACE and exact-match
// remaps, so the node resolves names and remaps itself and hands goroslib
// absolute names.
type ROSEnv struct {
	// MasterAddress is host:port of the master (ROS_MASTER_URI or __master:=).
	MasterAddress string
	// Host is how other nodes reach this one (ROS_HOSTNAME, ROS_IP, __hostname:=
	// or __ip:=); empty lets goroslib pick the interface facing the master.
	Host string
	// Namespace is absolute ("/" for the root), from ROS_NAMESPACE or __ns:=.
	Namespace string
	// Name is the node's base name (__name:=).
	Name string
	// LogFile is roslaunch's __log:= path (recorded, not written).
	LogFile string
	// Remaps maps resolved source names to resolved targets (from:=to).
	Remaps map[string]string
}

// ParseROSEnv reads ROS settings from getenv and the `x:=y` arguments in args.
// It returns the other arguments untouched for the flag parser.
func ParseROSEnv(args []string, getenv func(string) string, defaultName string) (ROSEnv, []string, error) {
	e := ROSEnv{Name: defaultName, Namespace: "/", Remaps: map[string]string{}}
	master := getenv("ROS_MASTER_URI")
	e.Host = getenv("ROS_HOSTNAME")
	if e.Host == "" {
		e.Host = getenv("ROS_IP")
	}
	ns := getenv("ROS_NAMESPACE")
	var rest []string
	type pair struct{ from, to string }
	var remaps []pair
	for _, a := range args {
		from, to, ok := strings.Cut(a, ":=")
		if !ok || strings.HasPrefix(a, "-") {
			rest = append(rest, a)
			continue
		}
		switch from {
		case "__name":
			e.Name = to
		case "__ns":
			ns = to
		case "__log":
			e.LogFile = to
		case "__master":
			master = to
		case "__hostname", "__ip":
			e.Host = to
		default:
			if strings.HasPrefix(from, "__") {
				continue // other special keys (e.g. __param) do not concern us
			}
			if strings.HasPrefix(from, "_") {
				continue // private parameter assignments are left to roslaunch/rosparam
			}
			remaps = append(remaps, pair{from, to})
		}
	}
	if e.Name == "" || strings.ContainsAny(e.Name, "/~ ") {
		return e, nil, fmt.Errorf("node name %q must be a non-empty base name without '/', '~' or spaces", e.Name)
	}
	if ns != "" {
		if !strings.HasPrefix(ns, "/") {
			ns = "/" + ns
		}
		ns = strings.TrimRight(ns, "/")
		if ns == "" {
			ns = "/"
		}
		e.Namespace = ns
	}
	if master == "" {
		e.MasterAddress = "127.0.0.1:11311"
	} else {
		u, err := url.Parse(master)
		if err != nil || u.Host == "" {
			return e, nil, fmt.Errorf("ROS_MASTER_URI %q is not a URI like http://host:11311", master)
		}
		e.MasterAddress = u.Host
		if u.Port() == "" {
			e.MasterAddress = u.Host + ":11311"
		}
	}
	for _, r := range remaps {
		e.Remaps[e.resolveNoRemap(r.from)] = e.resolveNoRemap(r.to)
	}
	return e, rest, nil
}

// FullName is the node's absolute name.
func (e ROSEnv) FullName() string { return joinName(e.Namespace, e.Name) }

// Resolve turns a graph name (absolute "/a", private "~a" or relative "a")
// into an absolute name and applies the remaps.
func (e ROSEnv) Resolve(name string) string {
	r := e.resolveNoRemap(name)
	if to, ok := e.Remaps[r]; ok {
		return to
	}
	return r
}

func (e ROSEnv) resolveNoRemap(name string) string {
	switch {
	case strings.HasPrefix(name, "/"):
		return name
	case strings.HasPrefix(name, "~"):
		return joinName(e.FullName(), strings.TrimPrefix(strings.TrimPrefix(name, "~"), "/"))
	default:
		return joinName(e.Namespace, name)
	}
}

func joinName(ns, name string) string {
	if ns == "/" || ns == "" {
		return "/" + name
	}
	return ns + "/" + name
}
