package config

import (
	"strings"
	"testing"
)

type metaCfg struct {
	Rate  float64 `mapstructure:"map_rate" param:"positive,dynamic"`
	Size  int     `mapstructure:"queue_size" param:"min=1,max=64"`
	Mode  string  `mapstructure:"queue_policy" param:"oneof=latest|all"`
	Plain bool    `mapstructure:"plain"`
}

func TestMetas(t *testing.T) {
	m, err := Metas(&metaCfg{})
	if err != nil {
		t.Fatal(err)
	}
	if r := m["map_rate"]; !r.Dynamic || !r.Positive || r.Min != nil || r.Constraints() != "> 0" {
		t.Errorf("map_rate: %+v", r)
	}
	if s := m["queue_size"]; s.Dynamic || s.Min == nil || *s.Min != 1 || s.Max == nil || *s.Max != 64 || s.Constraints() != "" {
		t.Errorf("queue_size: %+v", s)
	}
	if q := m["queue_policy"]; q.Constraints() != "one of latest, all" {
		t.Errorf("queue_policy: %q", q.Constraints())
	}
	// descriptions are the shipped file's comments
	if !strings.HasPrefix(m["queue_size"].Description, "Frames waiting") || m["plain"].Dynamic || m["plain"].Min != nil || m["plain"].Description != "" {
		t.Errorf("descriptions: %q, plain %+v", m["queue_size"].Description, m["plain"])
	}
	type bad struct {
		X int `mapstructure:"x" param:"min=one"`
	}
	if _, err := Metas(&bad{}); err == nil || !strings.Contains(err.Error(), "setting x") {
		t.Errorf("a malformed tag: %v", err)
	}
	type unknown struct {
		X int `mapstructure:"x" param:"dyanmic"`
	}
	if _, err := Metas(&unknown{}); err == nil || !strings.Contains(err.Error(), "dyanmic") {
		t.Errorf("a misspelt tag: %v", err)
	}
}
