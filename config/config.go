// Package config is lingbotmap's one configuration schema at work: it names
// every setting from its key (flag, environment variable, ROS parameter; see
// schema.go), binds a command's settings to flags and loads them in order
// (load.go), and carries the shipped file, config/lingbotmap.yaml, inside the
// binary: the flags' help is read from its comments, and a test keeps it equal
// to the built-in defaults. The schema itself is the Go structs with their
// mapstructure tags (node.Config holding engine.Config).
package config

import (
	_ "embed"
	"strings"
)

// YAML is config/lingbotmap.yaml as shipped.
//
//go:embed lingbotmap.yaml
var YAML []byte

// Help maps each dotted key of the shipped file ("weights", "cuda.pdl") to the
// comment lines just above it, joined into one sentence.
func Help() map[string]string {
	help := map[string]string{}
	var comment []string
	section := ""
	for _, line := range strings.Split(string(YAML), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "":
			comment = nil
		case strings.HasPrefix(trimmed, "#"):
			comment = append(comment, strings.TrimSpace(strings.TrimPrefix(trimmed, "#")))
		default:
			key, _, ok := strings.Cut(trimmed, ":")
			if !ok {
				comment = nil
				continue
			}
			indented := strings.HasPrefix(line, " ")
			if !indented {
				section = ""
				if strings.HasSuffix(trimmed, ":") {
					section = key // a mapping such as "engine:"
					comment = nil
					continue
				}
			}
			full := key
			if indented && section != "" {
				full = section + "." + key
			}
			help[full] = strings.Join(comment, " ")
			comment = nil
		}
	}
	return help
}
