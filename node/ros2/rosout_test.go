package ros2

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// --log-level (global and per logger) and the stdout switch reach the
// node's handler; a bad level is an error naming it.
func TestLogArgs(t *testing.T) {
	env := func(string) string { return "" }
	parse := func(args ...string) (Args, error) {
		a, _, err := ParseArgs(append([]string{"--ros-args", "-r", "__ns:=/robot"}, args...), env, "lingbotmap")
		return a, err
	}
	a, err := parse()
	if err != nil || !a.Log.Rosout || !a.Log.Stdout || a.Log.Level != "" {
		t.Fatalf("defaults: %+v %v", a.Log, err)
	}
	a, err = parse("--log-level", "WARN", "--log-level", "other:=debug", "--disable-rosout-logs", "--disable-stdout-logs")
	if err != nil || a.Log.Rosout || a.Log.Stdout || a.Log.Level != "WARN" || a.Log.Levels["other"] != "debug" {
		t.Fatalf("switches: %+v %v", a.Log, err)
	}
	if _, err := parse("--log-level", "loud"); err == nil || !strings.Contains(err.Error(), "loud") {
		t.Errorf("a bad level: %v", err)
	}

	var out bytes.Buffer
	console := slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})
	for _, c := range []struct {
		args      []string
		debug, ok bool // debug enabled; info enabled
	}{
		{nil, false, true},
		{[]string{"--log-level", "debug"}, true, true},
		{[]string{"--log-level", "error"}, false, false},
		// the node's logger is "robot.lingbotmap"; a named level overrides the global one
		{[]string{"--log-level", "error", "--log-level", "robot.lingbotmap:=debug"}, true, true},
		{[]string{"--log-level", "other:=debug"}, false, true},
	} {
		a, err := parse(c.args...)
		if err != nil {
			t.Fatal(err)
		}
		h, err := NewLogHandler(console, a, slog.LevelInfo)
		if err != nil {
			t.Fatal(err)
		}
		if h.Enabled(t.Context(), slog.LevelDebug) != c.debug || h.Enabled(t.Context(), slog.LevelInfo) != c.ok {
			t.Errorf("%v: debug %v info %v", c.args, h.Enabled(t.Context(), slog.LevelDebug), h.Enabled(t.Context(), slog.LevelInfo))
		}
	}
	a, _ = parse("--disable-stdout-logs")
	h, _ := NewLogHandler(console, a, slog.LevelInfo)
	slog.New(h).Info("quiet")
	a, _ = parse()
	h, _ = NewLogHandler(console, a, slog.LevelInfo)
	slog.New(h).With("node", "/robot/lingbotmap").Info("heard")
	if s := out.String(); strings.Contains(s, "quiet") || !strings.Contains(s, "heard") || !strings.Contains(s, "node=/robot/lingbotmap") {
		t.Errorf("console: %q", s)
	}
}

func TestRosLevel(t *testing.T) {
	for l, want := range map[slog.Level]uint8{slog.LevelDebug: 10, slog.LevelInfo: 20, slog.LevelWarn: 30,
		slog.LevelError: 40, levelFatal: 50, slog.LevelInfo + 1: 20} {
		if got := rosLevel(l); got != want {
			t.Errorf("rosLevel(%v) = %d, want %d", l, got, want)
		}
	}
	var b strings.Builder
	writeAttr(&b, "g.", slog.Group("q", slog.String("a", "two words"), slog.Int("n", 3)))
	if b.String() != ` g.q.a="two words" g.q.n=3` {
		t.Errorf("writeAttr: %q", b.String())
	}
}
