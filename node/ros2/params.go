package ros2

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// Params holds a ROS 2 node's parameters by their dotted names
// ("engine.weights"), the way rcl flattens nested YAML maps. It implements
// node.ParamSource; the keys it is asked for may also be written the ROS 1
// way ("~engine/weights").
type Params struct {
	// mu guards values: the parameter services change them while the node
	// reads them (save_dir).
	mu     sync.Mutex
	values map[string]any // bool, int64, float64, string or []any of those
}

func newParams() *Params { return &Params{values: map[string]any{}} }

// normKey turns "~engine/weights", "engine/weights" or "engine.weights" into
// "engine.weights".
func normKey(k string) string {
	k = strings.TrimPrefix(k, "~")
	k = strings.Trim(k, "/")
	return strings.ReplaceAll(k, "/", ".")
}

// setString sets key from a -p value, read as YAML like rcl does
// ("true" is a bool, "3" an integer, "[1, 2]" a list).
func (p *Params) setString(key, value string) error {
	var v any
	if err := yaml.Unmarshal([]byte(value), &v); err != nil {
		return fmt.Errorf("value %q is not valid YAML: %w", value, err)
	}
	if v == nil {
		v = ""
	}
	return p.set(normKey(key), v)
}

func (p *Params) set(key string, v any) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch x := v.(type) {
	case bool, float64, string:
		p.values[key] = x
	case int:
		p.values[key] = int64(x)
	case int64:
		p.values[key] = x
	case []int64, []bool, []float64, []string, []byte:
		// a list a parameter service was given
		xv := reflect.ValueOf(x)
		out := make([]any, xv.Len())
		for i := range out {
			out[i] = xv.Index(i).Interface()
			if b, ok := out[i].(byte); ok {
				out[i] = int64(b)
			}
		}
		p.values[key] = out
	case uint64:
		if x > math.MaxInt64 {
			return fmt.Errorf("parameter %s: %d is out of range", key, x)
		}
		p.values[key] = int64(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			switch e := e.(type) {
			case bool, float64, string:
				out[i] = e
			case int:
				out[i] = int64(e)
			case int64:
				out[i] = e
			default:
				return fmt.Errorf("parameter %s: list element %v of type %T is not a bool, number or string", key, e, e)
			}
		}
		p.values[key] = out
	default:
		return fmt.Errorf("parameter %s: value %v of type %T is not a bool, number, string or list", key, v, v)
	}
	return nil
}

// loadYAML reads a ROS 2 parameters file: top-level keys are node names
// (absolute, relative to the root, or with the wildcards * and **), each
// holding ros__parameters. Sections for other nodes are ignored; within a
// file, later sections override earlier ones.
func (p *Params) loadYAML(b []byte, fullName string) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("not valid YAML: %w", err)
	}
	if len(doc.Content) == 0 {
		return nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("want a map of node names, each with ros__parameters")
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		name := root.Content[i].Value
		if !matchNode(name, fullName) {
			continue
		}
		var section any
		if err := root.Content[i+1].Decode(&section); err != nil {
			return fmt.Errorf("section %s: %w", name, err)
		}
		if err := p.loadSection(section); err != nil {
			return fmt.Errorf("section %s: %w", name, err)
		}
	}
	return nil
}

func (p *Params) loadSection(section any) error {
	m, ok := section.(map[string]any)
	if !ok {
		return fmt.Errorf("a node's section must be a map with ros__parameters")
	}
	rp, ok := m["ros__parameters"]
	if !ok {
		return fmt.Errorf("a node's section has no ros__parameters")
	}
	params, ok := rp.(map[string]any)
	if !ok {
		return fmt.Errorf("ros__parameters must be a map")
	}
	return p.flatten("", params)
}

func (p *Params) flatten(prefix string, m map[string]any) error {
	for k, v := range m {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		if sub, ok := v.(map[string]any); ok {
			if err := p.flatten(key, sub); err != nil {
				return err
			}
			continue
		}
		if err := p.set(key, v); err != nil {
			return err
		}
	}
	return nil
}

// matchNode reports whether a parameters file's node key matches the node's
// absolute name: "*" stands for one name token, "**" for any number.
func matchNode(pattern, fullName string) bool {
	if !strings.HasPrefix(pattern, "/") {
		pattern = "/" + pattern
	}
	return matchTokens(strings.Split(pattern[1:], "/"), strings.Split(fullName[1:], "/"))
}

func matchTokens(pat, name []string) bool {
	if len(pat) == 0 {
		return len(name) == 0
	}
	if pat[0] == "**" {
		for i := 0; i <= len(name); i++ {
			if matchTokens(pat[1:], name[i:]) {
				return true
			}
		}
		return false
	}
	if len(name) == 0 || (pat[0] != "*" && pat[0] != name[0]) {
		return false
	}
	return matchTokens(pat[1:], name[1:])
}

// ParamName is the ROS 2 parameter that sets configuration key key: the
// key itself ("engine.weights"), for messages that name parameters.
func (p *Params) ParamName(key string) string { return normKey(key) }

// IsSet reports whether key was given.
func (p *Params) IsSet(key string) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.values[normKey(key)]
	return ok, nil
}

func (p *Params) get(key string) (any, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.values[normKey(key)]
	if !ok {
		return nil, fmt.Errorf("parameter %s is not set", normKey(key))
	}
	return v, nil
}

// Bool reads a boolean parameter.
func (p *Params) Bool(key string) (bool, error) {
	v, err := p.get(key)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("parameter %s is %v, not a bool", normKey(key), v)
	}
	return b, nil
}

// Int reads an integer parameter.
func (p *Params) Int(key string) (int, error) {
	v, err := p.get(key)
	if err != nil {
		return 0, err
	}
	i, ok := v.(int64)
	if !ok || i < math.MinInt || i > math.MaxInt {
		return 0, fmt.Errorf("parameter %s is %v, not an integer", normKey(key), v)
	}
	return int(i), nil
}

// Float64 reads a floating-point parameter.
func (p *Params) Float64(key string) (float64, error) {
	v, err := p.get(key)
	if err != nil {
		return 0, err
	}
	f, ok := v.(float64)
	if !ok {
		return 0, fmt.Errorf("parameter %s is %v, not a floating-point number", normKey(key), v)
	}
	return f, nil
}

// String reads a string parameter. A list of numbers is returned as the
// numbers separated by spaces ("4 11 17 23"), the form the configuration
// takes for integer lists.
func (p *Params) String(key string) (string, error) {
	v, err := p.get(key)
	if err != nil {
		return "", err
	}
	switch x := v.(type) {
	case string:
		return x, nil
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			switch e := e.(type) {
			case int64:
				parts[i] = strconv.FormatInt(e, 10)
			case float64:
				parts[i] = strconv.FormatFloat(e, 'g', -1, 64)
			default:
				return "", fmt.Errorf("parameter %s is %v, not a string or a list of numbers", normKey(key), v)
			}
		}
		return strings.Join(parts, " "), nil
	}
	return "", fmt.Errorf("parameter %s is %v, not a string", normKey(key), v)
}
