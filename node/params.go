package node

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lingbotmap/lingbotmap/config"
)

// ParamServer is a Transport that also serves the node's settings as
// parameters while it runs (ROS 2: the rcl_interfaces parameter services and
// /parameter_events). Run offers it the node once the configuration is final.
type ParamServer interface {
	ServeParams(h ParamHost) (io.Closer, error)
}

// ParamHost is the node as a ParamServer sees it.
type ParamHost interface {
	// LiveParams lists every setting in schema order with its value now.
	LiveParams() []LiveParam
	// SetParams changes the settings named by vals' keys, all or none; each
	// value is a bool, int64, float64, string, []int64, []float64, []bool,
	// []string or []byte as the middleware typed it, nil to unset. A
	// refusal's error names each setting and why (read-only, wrong type,
	// out of range); it is logged and counted in /diagnostics.
	SetParams(vals map[string]any) error
	// Refused logs and counts a refusal the transport made itself (a
	// parameter only it knows).
	Refused(name string, err error)
}

// LiveParam is one setting as a parameter.
type LiveParam struct {
	Key string
	// Value is a bool, int64, float64, string or []int64.
	Value any
	config.Meta
}

// liveSettings holds the configuration as it is now: the dynamic settings
// (config.Meta.Dynamic) change while the node runs, through SetParams.
type liveSettings struct {
	mu      sync.Mutex
	cfg     Config
	metas   map[string]config.Meta
	changed chan struct{} // closed and replaced on every change
}

func (l *liveSettings) init(c Config) error {
	metas, err := config.Metas(&c)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cfg, l.metas, l.changed = c, metas, make(chan struct{})
	return nil
}

// get returns the configuration now and a channel closed at its next change.
func (l *liveSettings) get() (Config, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cfg, l.changed
}

// now is the configuration as it is now; readers of dynamic settings use it.
func (n *Node) now() Config {
	c, _ := n.live.get()
	return c
}

// LiveParams implements ParamHost.
func (n *Node) LiveParams() []LiveParam {
	c, _ := n.live.get()
	n.live.mu.Lock()
	metas := n.live.metas
	n.live.mu.Unlock()
	var out []LiveParam
	for _, s := range config.Settings(&c) {
		var v any
		switch s.Value.Kind() {
		case reflect.Bool:
			v = s.Value.Bool()
		case reflect.Int, reflect.Int64:
			v = s.Value.Int()
		case reflect.Float64:
			v = s.Value.Float()
		case reflect.String:
			v = s.Value.String()
		case reflect.Slice:
			ints := []int64{}
			for i := range s.Value.Len() {
				ints = append(ints, s.Value.Index(i).Int())
			}
			v = ints
		default:
			continue
		}
		out = append(out, LiveParam{Key: s.Key, Value: v, Meta: metas[s.Key]})
	}
	return out
}

// SetParams implements ParamHost.
func (n *Node) SetParams(vals map[string]any) error {
	keys := make([]string, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	n.live.mu.Lock()
	c := n.live.cfg
	settings := config.Settings(&c)
	var errs []error
	for _, key := range keys {
		i := slices.IndexFunc(settings, func(s config.Setting) bool { return s.Key == key })
		if i < 0 {
			errs = append(errs, fmt.Errorf("parameter '%s' is not declared by this node", key))
			continue
		}
		if !n.live.metas[key].Dynamic {
			if sameValue(settings[i].Value, vals[key]) {
				// Setting a read-only value to what it is changes nothing:
				// `ros2 param load` of a dump sets every parameter.
				continue
			}
			errs = append(errs, fmt.Errorf("parameter '%s' is read-only while the node runs: it takes effect at start (--ros-args -p %s:=VALUE or --params-file)", key, key))
			continue
		}
		if err := assign(settings[i].Value, vals[key]); err != nil {
			errs = append(errs, fmt.Errorf("parameter '%s' %w", key, err))
		}
	}
	if len(errs) == 0 {
		if err := c.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		n.live.mu.Unlock()
		err := errors.Join(errs...)
		n.Refused(strings.Join(keys, ","), err)
		return err
	}
	n.live.cfg = c
	close(n.live.changed)
	n.live.changed = make(chan struct{})
	n.live.mu.Unlock()
	var changed []any
	for _, k := range keys {
		changed = append(changed, k, vals[k])
	}
	n.log.Info("parameters changed", changed...)
	return nil
}

// Refused implements ParamHost.
func (n *Node) Refused(name string, err error) {
	n.stats.paramRefused.Add(1)
	n.stats.mu.Lock()
	n.stats.lastParamRefusal = err.Error()
	n.stats.mu.Unlock()
	n.log.Warn("parameter change refused", "parameter", name, "reason", err)
}

// assign sets v (a setting's field) to x, a value as the middleware typed
// it; a double setting takes no integer (rclcpp refuses it too), so that
// the type a parameter shows is the type it takes.
func assign(v reflect.Value, x any) error {
	want := map[reflect.Kind]string{reflect.Bool: "bool", reflect.Int: "integer", reflect.Int64: "integer",
		reflect.Float64: "double", reflect.String: "string", reflect.Slice: "integer array"}[v.Kind()]
	ok := false
	switch y := x.(type) {
	case bool:
		if ok = v.Kind() == reflect.Bool; ok {
			v.SetBool(y)
		}
	case int64:
		if ok = v.Kind() == reflect.Int || v.Kind() == reflect.Int64; ok {
			if v.OverflowInt(y) {
				return fmt.Errorf("is out of range: %d", y)
			}
			v.SetInt(y)
		}
	case float64:
		if ok = v.Kind() == reflect.Float64; ok {
			v.SetFloat(y)
		}
	case string:
		if ok = v.Kind() == reflect.String; ok {
			v.SetString(y)
		}
	case []int64:
		if ok = v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Int; ok {
			s := reflect.MakeSlice(v.Type(), len(y), len(y))
			for i, e := range y {
				s.Index(i).SetInt(e)
			}
			v.Set(s)
		}
	}
	if !ok {
		return fmt.Errorf("has type %s; a value of type %s cannot set it", want, typeWord(x))
	}
	return nil
}

// typeWord names a parameter value's type the way ROS 2 tools do.
func typeWord(x any) string {
	switch x.(type) {
	case nil:
		return "not set (a deletion)"
	case bool:
		return "bool"
	case int64:
		return "integer"
	case float64:
		return "double"
	case string:
		return "string"
	case []byte:
		return "byte array"
	case []bool:
		return "bool array"
	case []int64:
		return "integer array"
	case []float64:
		return "double array"
	case []string:
		return "string array"
	}
	return fmt.Sprintf("%T", x)
}

// sameValue reports whether x, as the middleware typed it, is v's value.
// Empty lists are equal whatever their element type: a YAML [] carries
// none (ros2 param load sends it as a bool array).
func sameValue(v reflect.Value, x any) bool {
	if xv := reflect.ValueOf(x); v.Kind() == reflect.Slice && xv.Kind() == reflect.Slice {
		if v.Len() == 0 && xv.Len() == 0 {
			return true
		}
	}
	tmp := reflect.New(v.Type()).Elem()
	if assign(tmp, x) != nil {
		return false
	}
	return reflect.DeepEqual(tmp.Interface(), v.Interface())
}

// period is the interval of rate events a second, kept between 1 ms and a
// day: any positive rate is a valid setting, and a ticker takes neither a
// zero nor an overflowed interval.
func period(rate float64) time.Duration {
	p := float64(time.Second) / rate
	return time.Duration(min(max(p, float64(time.Millisecond)), float64(24*time.Hour)))
}
