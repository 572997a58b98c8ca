package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// A setting has one name, its key: the YAML key with sections joined by dots
// ("device", "keyframe_interval", "cuda.pdl"). Every other spelling follows
// from the key by one rule each:
//
//	flag                --keyframe-interval, --cuda-pdl  (dots and underscores become hyphens)
//	environment         LINGBOTMAP_KEYFRAME_INTERVAL, LINGBOTMAP_CUDA_PDL  (upper case, dots become underscores)
//	ROS private param   ~keyframe_interval, ~cuda/pdl  (dots become slashes)
//
// Keys are the mapstructure tags of the configuration structs; a field tagged
// ",squash" adds its settings without a section.

// EnvPrefix starts every environment variable of a setting.
const EnvPrefix = "LINGBOTMAP"

// FlagName is the command-line flag of key, without the leading dashes:
// the key's spelling, or its entry in RenamedFlags.
func FlagName(key string) string {
	if r, ok := RenamedFlags[key]; ok {
		return r.Flag
	}
	return spelling(key)
}

func spelling(key string) string { return strings.NewReplacer(".", "-", "_", "-").Replace(key) }

// A RenamedFlag is the flag of a setting whose key's spelling was taken for
// another setting's. Old, the key's spelling, still works with a warning.
type RenamedFlag struct{ Flag, Old string }

// RenamedFlags are the exceptions to the one rule: --sliding-window (live
// keyframes in the KV cache) and --window-size (slots per window of
// windowed mode) stood side by side in bench and were taken for one another.
var RenamedFlags = map[string]RenamedFlag{
	"sliding_window": {Flag: "cache-keyframes", Old: "sliding-window"},
	"window_size":    {Flag: "window-slots", Old: "window-size"},
}

// EnvName is the environment variable of key.
func EnvName(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// ParamName is the ROS private parameter of key.
func ParamName(key string) string { return "~" + strings.ReplaceAll(key, ".", "/") }

// NormalizeFlag lets the spellings of the first node flags keep working:
// --engine.keyframe_interval and --queue_policy mean --keyframe-interval and
// --queue-policy. It is a pflag normalisation function, so the old spellings
// are accepted without being listed in --help.
func NormalizeFlag(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	return pflag.NormalizedName(spelling(strings.TrimPrefix(name, "engine.")))
}

// Setting is one leaf of a configuration struct.
type Setting struct {
	// Key is the setting's dotted name.
	Key string
	// Value is the addressable field.
	Value reflect.Value
	// Tag is the field's struct tag (see Meta for its param entry).
	Tag reflect.StructTag
}

// Settings lists the leaves of the struct cfg points to, in declaration
// order. Fields tagged "-" and functions are not settings.
func Settings(cfg any) []Setting {
	v := reflect.ValueOf(cfg)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("config.Settings: want a pointer to a struct, got %T", cfg))
	}
	var out []Setting
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		t := v.Type()
		for i := range t.NumField() {
			name, opts, _ := strings.Cut(t.Field(i).Tag.Get("mapstructure"), ",")
			fv := v.Field(i)
			switch {
			case name == "-" || !t.Field(i).IsExported() || fv.Kind() == reflect.Func:
				continue
			case fv.Kind() == reflect.Struct && opts == "squash":
				walk(prefix, fv)
			case name == "":
				continue
			case fv.Kind() == reflect.Struct:
				walk(prefix+name+".", fv)
			default:
				out = append(out, Setting{Key: prefix + name, Value: fv, Tag: t.Field(i).Tag})
			}
		}
	}
	walk("", v.Elem())
	return out
}

// Keys lists the keys of the struct cfg points to.
func Keys(cfg any) []string {
	var keys []string
	for _, s := range Settings(cfg) {
		keys = append(keys, s.Key)
	}
	return keys
}

// Values maps every key of the struct cfg points to onto its value, for
// records such as run.json.
func Values(cfg any) map[string]any {
	out := map[string]any{}
	for _, s := range Settings(cfg) {
		out[s.Key] = s.Value.Interface()
	}
	return out
}

// Meta is what the schema says of a setting for those who change it while
// a node runs (ROS 2 parameters): its help, its bounds and whether it may
// change at once. The bounds and the dynamic flag are the struct tag
// `param:"dynamic,min=0,max=1,positive,oneof=a|b"` of the setting's field;
// the description is the shipped file's comment. The bounds only describe:
// each command's Validate enforces them (a test keeps the two in step).
type Meta struct {
	Description string
	// Min and Max are inclusive bounds, nil when the side is open.
	Min, Max *float64
	// Positive says the value must be above 0 (an open bound ROS ranges
	// cannot express).
	Positive bool
	// OneOf lists the accepted values of a string setting; empty accepts any.
	OneOf []string
	// Dynamic settings may change while the node runs; the others take
	// effect at start only.
	Dynamic bool
}

// Constraints says in words what a range of numbers cannot ("> 0", "one
// of latest, all"), "" when nothing.
func (m Meta) Constraints() string {
	var parts []string
	if m.Positive {
		parts = append(parts, "> 0")
	}
	if len(m.OneOf) > 0 {
		parts = append(parts, "one of "+strings.Join(m.OneOf, ", "))
	}
	return strings.Join(parts, "; ")
}

// Metas returns the Meta of every setting of the struct cfg points to, by
// key. A malformed param tag is an error naming the key.
func Metas(cfg any) (map[string]Meta, error) {
	help := Help()
	out := map[string]Meta{}
	for _, s := range Settings(cfg) {
		m, err := parseParamTag(s.Tag.Get("param"))
		if err != nil {
			return nil, fmt.Errorf("config: setting %s: param tag: %w", s.Key, err)
		}
		m.Description = help[s.Key]
		out[s.Key] = m
	}
	return out, nil
}

func parseParamTag(tag string) (Meta, error) {
	var m Meta
	if tag == "" {
		return m, nil
	}
	for _, part := range strings.Split(tag, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "dynamic":
			m.Dynamic = true
		case "positive":
			m.Positive = true
		case "min", "max":
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return m, fmt.Errorf("%s=%q is not a number", k, v)
			}
			if k == "min" {
				m.Min = &x
			} else {
				m.Max = &x
			}
		case "oneof":
			m.OneOf = strings.Split(v, "|")
		default:
			return m, fmt.Errorf("unknown entry %q", part)
		}
	}
	return m, nil
}
