package ros1

import (
	"github.com/bluenviron/goroslib/v2"

	"github.com/lingbotmap/lingbotmap/config"
)

// ParamName is the ROS 1 private parameter that overrides a configuration
// key: "cuda.pdl" → "~cuda/pdl" (config.ParamName, the schema's one rule).
func ParamName(key string) string { return config.ParamName(key) }

// params reads private parameters by configuration key. goroslib v2.1.5
// rejects the master's answer for "~x" keys (the master echoes the resolved
// name), so the names are resolved here first.
type params struct{ t *Transport }

func (p params) ParamName(key string) string { return ParamName(key) }

func (p params) get(key string, f func(gn *goroslib.Node, name string) error) error {
	gn, err := p.t.current()
	if err != nil {
		return err
	}
	return f(gn, p.t.env.resolveNoRemap(ParamName(key)))
}

func (p params) IsSet(key string) (v bool, err error) {
	err = p.get(key, func(gn *goroslib.Node, name string) (e error) { v, e = gn.ParamIsSet(name); return })
	return v, err
}

func (p params) Bool(key string) (v bool, err error) {
	err = p.get(key, func(gn *goroslib.Node, name string) (e error) { v, e = gn.ParamGetBool(name); return })
	return v, err
}

func (p params) Int(key string) (v int, err error) {
	err = p.get(key, func(gn *goroslib.Node, name string) (e error) { v, e = gn.ParamGetInt(name); return })
	return v, err
}

func (p params) Float64(key string) (v float64, err error) {
	err = p.get(key, func(gn *goroslib.Node, name string) (e error) { v, e = gn.ParamGetFloat64(name); return })
	return v, err
}

func (p params) String(key string) (v string, err error) {
	err = p.get(key, func(gn *goroslib.Node, name string) (e error) { v, e = gn.ParamGetString(name); return })
	return v, err
}
