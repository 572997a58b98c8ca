package node_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/tf2_msgs"

	"github.com/lingbotmap/lingbotmap/config"
	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/internal/syncbuf"
	"github.com/lingbotmap/lingbotmap/node"
	"github.com/lingbotmap/lingbotmap/node/nodetest"
)

// paramTransport is the test transport with a parameter server: it hands
// the node's ParamHost to the test.
type paramTransport struct {
	*nodetest.Transport
	host chan node.ParamHost
}

func (p *paramTransport) ServeParams(h node.ParamHost) (io.Closer, error) {
	p.host <- h
	return io.NopCloser(strings.NewReader("")), nil
}

// A running node serves every setting with its value, description and
// bounds; dynamic settings change at once, the others and bad values are
// refused with the reason, logged and counted in /diagnostics.
func TestCoreLiveParams(t *testing.T) {
	ref := goldenReplay(t)
	tr := &paramTransport{Transport: nodetest.New("/lbm", nil), host: make(chan node.ParamHost, 1)}
	cfg := fastConfig(t)
	logs := &syncbuf.Buffer{}
	n, err := node.New(node.Options{Config: cfg, Transport: tr, Log: slog.New(slog.NewTextHandler(logs, nil)),
		NewStream: func(context.Context, node.Config) (engine.Stream, error) { return ref, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	var h node.ParamHost
	select {
	case h = <-tr.host:
	case err := <-done:
		t.Fatalf("Run ended before serving parameters: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no ServeParams within 10 s")
	}
	waitFor(t, "the subscription", 5*time.Second, func() bool { return tr.Subscribed("/image") })

	params := map[string]node.LiveParam{}
	for _, p := range h.LiveParams() {
		params[p.Key] = p
	}
	def := node.DefaultConfig()
	if len(params) != len(config.Keys(&def)) {
		t.Fatalf("%d parameters, want one per setting (%d)", len(params), len(config.Keys(&def)))
	}
	for k, p := range params {
		if p.Description == "" {
			t.Errorf("%s has no description", k)
		}
	}
	if p := params["map_rate"]; p.Value != 1000.0 || !p.Dynamic || !p.Positive {
		t.Errorf("map_rate: %+v", p)
	}
	if p := params["queue_size"]; p.Value != int64(4) || p.Dynamic || p.Min == nil || *p.Min != 1 {
		t.Errorf("queue_size: %+v", p)
	}
	if p := params["selected_layers"]; !reflect.DeepEqual(p.Value, []int64{}) {
		t.Errorf("selected_layers: %#v", p.Value)
	}

	refusals := []struct {
		vals map[string]any
		want string
	}{
		{map[string]any{"map_rate": "fast"}, "parameter 'map_rate' has type double; a value of type string cannot set it"},
		{map[string]any{"map_rate": int64(3)}, "parameter 'map_rate' has type double; a value of type integer cannot set it"},
		{map[string]any{"map_rate": -1.0}, "'map_rate' must be > 0"},
		{map[string]any{"queue_size": int64(8)}, "parameter 'queue_size' is read-only while the node runs"},
		{map[string]any{"no_such": true}, "parameter 'no_such' is not declared"},
		{map[string]any{"save_dir": nil}, "a value of type not set"},
		// all or none: the valid map_rate is not taken either
		{map[string]any{"map_rate": 5.0, "weights": "/x"}, "parameter 'weights' is read-only"},
	}
	for _, r := range refusals {
		err := h.SetParams(r.vals)
		if err == nil || !strings.Contains(err.Error(), r.want) {
			t.Errorf("SetParams(%v) = %v, want an error with %q", r.vals, err, r.want)
		}
	}
	// A read-only setting set to its own value is no change (ros2 param load).
	if err := h.SetParams(map[string]any{"queue_size": int64(4), "selected_layers": []bool{}, "cuda.pdl": true}); err != nil {
		t.Errorf("read-only settings set to their values: %v", err)
	}
	if p := paramValue(h, "map_rate"); p != 1000.0 {
		t.Errorf("map_rate is %v after refusals, want 1000", p)
	}
	d := waitDiag(t, tr.Transport, map[string]string{"parameter_changes_refused": "7"})
	if r := diagValue(d, "parameter_last_refusal"); !strings.Contains(r, "'weights' is read-only") {
		t.Errorf("parameter_last_refusal %q", r)
	}
	if !strings.Contains(logs.String(), "parameter change refused") {
		t.Errorf("refusals not logged:\n%s", logs.String())
	}

	// Extreme rates are valid settings and crash nothing.
	for _, r := range []float64{1e300, 1e-300, 5e-324} {
		if err := h.SetParams(map[string]any{"map_rate": r, "diagnostics_rate": r}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.SetParams(map[string]any{"diagnostics_rate": 50.0}); err != nil {
		t.Fatal(err)
	}

	// save_dir applies to the next ~save_map; publish_tf to the next frame.
	dir := filepath.Join(t.TempDir(), "moved")
	if err := h.SetParams(map[string]any{"save_dir": dir, "publish_tf": false, "map_rate": 2.5}); err != nil {
		t.Fatal(err)
	}
	if v := paramValue(h, "save_dir"); v != dir {
		t.Errorf("save_dir is %v", v)
	}
	w, hgt := ref.Size()
	// The replay answers once its scale frames are in.
	for i := range 10 {
		if err := tr.Deliver("/image", frame(i, w, hgt, "cam"), nil); err != nil {
			t.Fatal(err)
		}
	}
	waitDiag(t, tr.Transport, map[string]string{"frames_processed": "10"})
	if msg, err := tr.Call("/lbm/save_map"); err != nil {
		t.Fatalf("~save_map: %v", err)
	} else if !strings.Contains(msg, dir) {
		t.Errorf("~save_map wrote %q, not into %s", msg, dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "trajectory.tum")); err != nil {
		t.Errorf("the new save_dir: %v", err)
	}
	if m := tr.Messages("/tf"); len(m) != 0 {
		t.Errorf("%d /tf messages after publish_tf:=false", len(m))
	}
	if err := h.SetParams(map[string]any{"publish_tf": true}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Deliver("/image", frame(10, w, hgt, "cam"), nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a /tf message after publish_tf:=true", 10*time.Second, func() bool {
		_, ok := tr.Last("/tf").(*tf2_msgs.TFMessage)
		return ok
	})

	// conf_threshold applies to the next keyframe's cloud: above every
	// confidence, it keeps no point.
	clouds := tr.Messages("/lbm/cloud")
	if len(clouds) == 0 || clouds[len(clouds)-1].(*sensor_msgs.PointCloud2).Width == 0 {
		t.Fatalf("%d clouds before the change, the last one empty", len(clouds))
	}
	if err := h.SetParams(map[string]any{"conf_threshold": 1e9}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Deliver("/image", frame(11, w, hgt, "cam"), nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a cloud after conf_threshold:=1e9", 10*time.Second, func() bool {
		return len(tr.Messages("/lbm/cloud")) > len(clouds)
	})
	if c := tr.Last("/lbm/cloud").(*sensor_msgs.PointCloud2); c.Width != 0 {
		t.Errorf("the cloud after conf_threshold:=1e9 has %d points", c.Width)
	}
}

func paramValue(h node.ParamHost, key string) any {
	for _, p := range h.LiveParams() {
		if p.Key == key {
			return p.Value
		}
	}
	return nil
}

// The bounds the schema declares (param tags) are the ones Validate
// enforces: each bound passes, the value just beyond it fails naming the key.
func TestParamBoundsMatchValidate(t *testing.T) {
	def := node.DefaultConfig()
	metas, err := config.Metas(&def)
	if err != nil {
		t.Fatal(err)
	}
	try := func(key string, v any) error {
		c := node.DefaultConfig()
		for _, s := range config.Settings(&c) {
			if s.Key == key {
				s.Value.Set(reflect.ValueOf(v).Convert(s.Value.Type()))
			}
		}
		return c.Validate()
	}
	checked := 0
	for key, m := range metas {
		var kind reflect.Kind
		for _, s := range config.Settings(&def) {
			if s.Key == key {
				kind = s.Value.Kind()
			}
		}
		step := 1e-9
		if kind == reflect.Int {
			step = 1
		}
		if m.Min != nil {
			checked++
			if err := try(key, *m.Min); err != nil {
				t.Errorf("%s at its minimum %v: %v", key, *m.Min, err)
			}
			if err := try(key, *m.Min-step); err == nil || !strings.Contains(err.Error(), "'"+key+"'") {
				t.Errorf("%s below its minimum: %v", key, err)
			}
		}
		if m.Max != nil {
			checked++
			if err := try(key, *m.Max+step); err == nil {
				t.Errorf("%s above its maximum passed", key)
			}
		}
		if m.Positive {
			checked++
			if err := try(key, 0.0); err == nil || !strings.Contains(err.Error(), "'"+key+"'") {
				t.Errorf("%s at 0: %v", key, err)
			}
		}
		for _, v := range m.OneOf {
			if err := try(key, v); err != nil {
				t.Errorf("%s=%s: %v", key, v, err)
			}
		}
		if len(m.OneOf) > 0 {
			checked++
			if err := try(key, "bogus"); err == nil {
				t.Errorf("%s=bogus passed", key)
			}
		}
	}
	if checked < 10 {
		t.Errorf("only %d bounds checked", checked)
	}
}
