package ros2

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lingbotmap/lingbotmap/msgs/cdr"
	"github.com/lingbotmap/lingbotmap/node/ros2/dds"
)

// rosoutTopic carries an rclcpp node's log lines (rcl_interfaces/msg/Log).
const rosoutTopic = "/rosout"

// rosoutQoS is rcl's for /rosout: reliable, transient local, keep last
// 1000, each line valid for 10 s (a late subscriber gets the last 10 s).
var rosoutQoS = dds.QoS{Reliable: true, TransientLocal: true, Depth: 1000, Lifespan: 10 * time.Second}

// levelFatal is rcl's FATAL as a slog level, above slog.LevelError.
const levelFatal = slog.LevelError + 4

// ParseLogLevel reads an rcl log level: debug, info, warn, error or fatal,
// in any case.
func ParseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	case "fatal":
		return levelFatal, nil
	}
	return 0, fmt.Errorf("log level %q: want debug, info, warn, error or fatal", s)
}

// rosLevel is the rcl_interfaces/msg/Log level of a slog level.
func rosLevel(l slog.Level) uint8 {
	switch {
	case l < slog.LevelInfo:
		return cdr.LogDebug
	case l < slog.LevelWarn:
		return cdr.LogInfo
	case l < slog.LevelError:
		return cdr.LogWarn
	case l < levelFatal:
		return cdr.LogError
	}
	return cdr.LogFatal
}

// LogHandler is the node's slog.Handler under ROS 2: it passes records at
// or above the level --ros-args --log-level sets to the console handler
// (unless --disable-stdout-logs) and publishes them on /rosout as
// rcl_interfaces/msg/Log (unless --disable-rosout-logs) once the transport
// joined the graph. Hand a logger on it to New, which finds it there.
type LogHandler struct {
	sh     *logShared
	inner  slog.Handler
	prefix string // the attributes of With, formatted
	group  string // the open group of WithGroup, "g." for keys
}

type logShared struct {
	level  slog.Level
	name   string // the logger name, rcl's: "ns.node"
	stdout bool
	rosout bool

	mu      sync.RWMutex
	w       *dds.Writer // nil until connected, and after Close
	dropped atomic.Int64
}

// NewLogHandler wraps console, the handler of the console (it should pass
// every level: the level is this handler's), for the node a describes.
// fallback is the level when --log-level names none for the node.
func NewLogHandler(console slog.Handler, a Args, fallback slog.Level) (*LogHandler, error) {
	name := strings.ReplaceAll(strings.TrimPrefix(a.FullName(), "/"), "/", ".")
	sh := &logShared{level: fallback, name: name, stdout: a.Log.Stdout, rosout: a.Log.Rosout}
	for _, s := range []string{a.Log.Level, a.Log.Levels[name]} {
		if s == "" {
			continue
		}
		l, err := ParseLogLevel(s)
		if err != nil {
			return nil, err
		}
		sh.level = l
	}
	return &LogHandler{sh: sh, inner: console}, nil
}

// Enabled implements slog.Handler.
func (h *LogHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.sh.level }

// Handle implements slog.Handler.
func (h *LogHandler) Handle(ctx context.Context, r slog.Record) error {
	var err error
	if h.sh.stdout {
		err = h.inner.Handle(ctx, r)
	}
	if !h.sh.rosout {
		return err
	}
	h.sh.mu.RLock()
	defer h.sh.mu.RUnlock()
	if h.sh.w == nil {
		return err
	}
	var b strings.Builder
	b.WriteString(r.Message)
	b.WriteString(h.prefix)
	r.Attrs(func(a slog.Attr) bool {
		writeAttr(&b, h.group, a)
		return true
	})
	msg := &cdr.Log{Stamp: r.Time, Level: rosLevel(r.Level), Name: h.sh.name, Msg: b.String()}
	if r.PC != 0 {
		f, _ := runtime.CallersFrames([]uintptr{r.PC}).Next()
		msg.File, msg.Function, msg.Line = f.File, f.Function, uint32(f.Line)
	}
	data, merr := marshal(msg)
	if merr == nil {
		merr = h.sh.w.Write(data)
	}
	if merr != nil {
		// Logging the failure would come back here: it is counted only.
		h.sh.dropped.Add(1)
	}
	return err
}

// WithAttrs implements slog.Handler.
func (h *LogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.prefix)
	for _, a := range attrs {
		writeAttr(&b, h.group, a)
	}
	return &LogHandler{sh: h.sh, inner: h.inner.WithAttrs(attrs), prefix: b.String(), group: h.group}
}

// WithGroup implements slog.Handler.
func (h *LogHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &LogHandler{sh: h.sh, inner: h.inner.WithGroup(name), prefix: h.prefix, group: h.group + name + "."}
}

// writeAttr appends " key=value" as slog's text handler spells it.
func writeAttr(b *strings.Builder, group string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if a.Value.Kind() == slog.KindGroup {
		g := group
		if a.Key != "" {
			g += a.Key + "."
		}
		for _, ga := range a.Value.Group() {
			writeAttr(b, g, ga)
		}
		return
	}
	v := a.Value.String()
	if v == "" || strings.ContainsAny(v, " \t\n\"=") {
		v = strconv.Quote(v)
	}
	b.WriteString(" " + group + a.Key + "=" + v)
}

// Dropped counts the log lines that could not be published on /rosout.
func (h *LogHandler) Dropped() int64 { return h.sh.dropped.Load() }

// openRosout starts publishing the node's log lines, if its logger is a
// LogHandler with /rosout on. t.mu is held.
func (t *Transport) openRosoutLocked(pp *dds.Participant) error {
	if t.logs == nil || !t.logs.rosout {
		return nil
	}
	lt, err := typeOf(&cdr.Log{})
	if err != nil {
		return err
	}
	q := rosoutQoS
	q.UserData = typeHashUserData(lt.Hash)
	w, err := pp.NewWriter(topicName(rosoutTopic), lt.DDSName, q)
	if err != nil {
		return fmt.Errorf("ros2: advertising %s: %w", rosoutTopic, err)
	}
	t.writers[w.GUID()] = struct{}{}
	t.logs.mu.Lock()
	t.logs.w = w
	t.logs.mu.Unlock()
	return nil
}

// closeRosout stops publishing log lines; the participant deletes the writer.
func (t *Transport) closeRosout() {
	if t.logs == nil {
		return
	}
	t.logs.mu.Lock()
	t.logs.w = nil
	t.logs.mu.Unlock()
}
