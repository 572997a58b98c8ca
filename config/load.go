package config

import (
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// Binding is one command's view of the schema: the flags it registered and
// the defaults they show.
type Binding struct {
	fs       *pflag.FlagSet
	defaults any // a pointer to a copy of the command's defaults
	keys     []string
	file     string
}

// Bind registers on fs the flag --config and one flag per setting of the
// struct defaults points to whose key is in keys (every setting when keys is
// empty), showing the value in defaults and the shipped file's comment as
// help. The old flag spellings are accepted (see NormalizeFlag). A key that
// is not in the schema is an error: commands name their settings by key.
func Bind(fs *pflag.FlagSet, defaults any, keys []string) (*Binding, error) {
	all := Keys(defaults)
	if len(keys) == 0 {
		keys = all
	}
	for _, k := range keys {
		if !slices.Contains(all, k) {
			return nil, fmt.Errorf("config: %q is not a setting", k)
		}
	}
	b := &Binding{fs: fs, defaults: copyOf(defaults), keys: keys}
	fs.SetNormalizeFunc(NormalizeFlag)
	fs.StringVar(&b.file, "config", "", "YAML configuration file (config/lingbotmap.yaml lists every setting)")
	help := Help()
	for _, s := range Settings(b.defaults) {
		if !slices.Contains(keys, s.Key) {
			continue
		}
		usage := help[s.Key]
		if usage == "" {
			usage = "see config/lingbotmap.yaml"
		}
		name := FlagName(s.Key)
		if r, ok := RenamedFlags[s.Key]; ok && s.Value.Kind() == reflect.Int {
			// the old spelling: hidden, and warned about when used
			fs.Int64(r.Old, s.Value.Int(), usage)
			if err := fs.MarkDeprecated(r.Old, "use --"+r.Flag); err != nil {
				return nil, err
			}
		}
		switch s.Value.Kind() {
		case reflect.Bool:
			fs.Bool(name, s.Value.Bool(), usage)
		case reflect.Int, reflect.Int64:
			fs.Int64(name, s.Value.Int(), usage)
		case reflect.Float64:
			fs.Float64(name, s.Value.Float(), usage)
		case reflect.String:
			fs.String(name, s.Value.String(), usage)
		case reflect.Slice:
			ints, ok := s.Value.Interface().([]int)
			if !ok {
				return nil, fmt.Errorf("config: setting %s has type %s, which has no flag", s.Key, s.Value.Type())
			}
			fs.IntSlice(name, ints, usage+" (comma-separated)")
		default:
			return nil, fmt.Errorf("config: setting %s has type %s, which has no flag", s.Key, s.Value.Type())
		}
	}
	return b, nil
}

// Keys lists the settings the command took flags for.
func (b *Binding) Keys() []string { return slices.Clone(b.keys) }

// Sources says where the loaded settings came from.
type Sources struct {
	// File is the --config file read, or "".
	File string `json:"file"`
	// From maps each of the command's keys not left at its default to
	// "file", "env" or "flag": the last of them that gave it (the node's ROS
	// parameters come later; node.ApplyParams lists the keys they set).
	From map[string]string `json:"from,omitempty"`
}

// Given reports whether the user gave key anywhere.
func (s Sources) Given(key string) bool { _, ok := s.From[key]; return ok }

// Load fills the struct dst points to (the type Bind was given) from, lowest
// first: the defaults, the --config file, LINGBOTMAP_* environment variables
// and the flags given on the command line. Only the command's settings are
// taken; the others keep their defaults, so one file can serve every command.
// Unknown keys in the file and values of the wrong type are errors naming the
// key. Validation is the caller's: commands check the settings they use.
func (b *Binding) Load(dst any) (Sources, error) {
	if reflect.TypeOf(dst) != reflect.TypeOf(b.defaults) {
		return Sources{}, fmt.Errorf("config: Load into %T, bound with %T", dst, b.defaults)
	}
	v := viper.New()
	settings := Settings(b.defaults)
	for _, s := range settings {
		v.SetDefault(s.Key, s.Value.Interface())
	}
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	src := Sources{File: b.file, From: map[string]string{}}
	if b.file != "" {
		v.SetConfigFile(b.file)
		v.SetConfigType("yaml")
		if err := v.ReadInConfig(); err != nil {
			return Sources{}, fmt.Errorf("reading the configuration file %s: %w", b.file, err)
		}
	}
	for _, s := range settings {
		if !slices.Contains(b.keys, s.Key) {
			continue // a setting of other commands: loaded, but not this command's
		}
		if b.file != "" && v.InConfig(s.Key) {
			src.From[s.Key] = "file"
		}
		if os.Getenv(EnvName(s.Key)) != "" {
			src.From[s.Key] = "env"
		}
		f := b.fs.Lookup(FlagName(s.Key))
		if r, ok := RenamedFlags[s.Key]; ok && f != nil && !f.Changed {
			if old := b.fs.Lookup(r.Old); old != nil && old.Changed {
				f = old
			}
		}
		if f != nil {
			if err := v.BindPFlag(s.Key, f); err != nil {
				return Sources{}, fmt.Errorf("binding flag --%s: %w", f.Name, err)
			}
			if f.Changed {
				src.From[s.Key] = "flag"
			}
		}
	}
	if err := v.UnmarshalExact(dst); err != nil {
		return Sources{}, fmt.Errorf("configuration: %w", err)
	}
	// A file or variable may set other commands' settings; this command
	// keeps its defaults for them.
	for i, s := range Settings(dst) {
		if !slices.Contains(b.keys, s.Key) {
			s.Value.Set(settings[i].Value)
		}
	}
	if err := checkFinite(dst); err != nil {
		return Sources{}, fmt.Errorf("configuration: %w", err)
	}
	emptyListsToNil(dst)
	return src, nil
}

// emptyListsToNil makes an empty list (YAML's [], an empty flag) the same as
// no list, which is how list settings say "the default choice".
func emptyListsToNil(cfg any) {
	for _, s := range Settings(cfg) {
		if s.Value.Kind() == reflect.Slice && s.Value.Len() == 0 {
			s.Value.SetZero()
		}
	}
}

// checkFinite rejects NaN and infinite numbers, which no setting means.
func checkFinite(cfg any) error {
	var errs []error
	for _, s := range Settings(cfg) {
		if s.Value.Kind() == reflect.Float64 {
			if x := s.Value.Float(); math.IsNaN(x) || math.IsInf(x, 0) {
				errs = append(errs, fmt.Errorf("'%s' must be a finite number, not %g", s.Key, x))
			}
		}
	}
	return errors.Join(errs...)
}

// copyOf returns a pointer to a copy of the struct p points to.
func copyOf(p any) any {
	v := reflect.ValueOf(p)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("config: want a pointer to a struct, got %T", p))
	}
	c := reflect.New(v.Elem().Type())
	c.Elem().Set(v.Elem())
	return c.Interface()
}
