package ros1

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/golden/replay"
	"github.com/lingbotmap/lingbotmap/internal/syncbuf"
	"github.com/lingbotmap/lingbotmap/node"
	"github.com/lingbotmap/lingbotmap/node/ros1/rostest"
)

// fullStream is the real engine's behaviour once its cache is full: every
// push fails with engine.ErrCacheFull until Reset.
type fullStream struct {
	*replay.Stream
	mu     sync.Mutex
	pushes int
	limit  int
}

func (s *fullStream) Push(ctx context.Context, f engine.Frame) ([]engine.Result, error) {
	s.mu.Lock()
	s.pushes++
	full := s.pushes > s.limit
	s.mu.Unlock()
	if full {
		return nil, engine.ErrCacheFull
	}
	return s.Stream.Push(ctx, f)
}

func (s *fullStream) Reset() error {
	s.mu.Lock()
	s.pushes = 0
	s.mu.Unlock()
	return s.Stream.Reset()
}

// A full cache is reported once in the log and as cache_full in /diagnostics,
// every later frame is counted as an engine error, and ~reset clears it.
func TestNodeReportsFullCacheOnce(t *testing.T) {
	master := rostest.StartMaster(t)
	frames := rostest.Frames(t, 10)
	replay, err := replay.New(goldenDir(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.DefaultConfig()
	cfg.QueuePolicy, cfg.DiagnosticsRate = "all", 20
	logs := &syncbuf.Buffer{}
	stream := &fullStream{Stream: replay, limit: 5}
	r := startRig(t, master, "lbmfull", cfg, stream, slog.New(slog.NewTextHandler(logs, nil)), "/diagnostics")
	rec, imgPub := r.rec, r.camera
	for i, f := range frames {
		imgPub.Write(rostest.ImageMsg(f, std_msgs.Header{Stamp: rostest.StampOf(i), FrameId: "cam"}))
	}
	waitFor(t, "five engine errors and cache_full in /diagnostics", 20*time.Second, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return diagValue(rec.diag, "engine_errors") == "5" && diagValue(rec.diag, "cache_full") == "true"
	})
	if c := strings.Count(logs.String(), "the KV cache is full"); c != 1 {
		t.Fatalf("the full cache was logged %d times, want once:\n%s", c, logs.String())
	}
	if out := master.Run(t, 20*time.Second, "rosservice", "call", "/lbmfull/reset"); !strings.Contains(out, "success: True") {
		t.Fatalf("reset: %s", out)
	}
	waitFor(t, "cache_full cleared by ~reset", 10*time.Second, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return diagValue(rec.diag, "cache_full") == "false"
	})
}
