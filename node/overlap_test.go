package node_test

import (
	"context"
	"log/slog"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/nav_msgs"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/backend/hostpoints"
	"github.com/lingbotmap/lingbotmap/node"
	"github.com/lingbotmap/lingbotmap/node/nodetest"
)

// queuedPoints is the CPU backend with the device points' capabilities
// (backend.AsyncUnprojector) done on the host, as a GPU backend has them:
// StartUnproject's points are made at Wait. It counts the points queued.
type queuedPoints struct {
	backend.Backend
	mu     sync.Mutex
	queued int
}

func (q *queuedPoints) Unproject(depth, conf backend.Tensor, u backend.Unprojection) ([]float32, []int32, error) {
	return hostpoints.Unproject(q, depth, conf, u)
}

func (q *queuedPoints) StartUnproject(depth, conf backend.Tensor, u backend.Unprojection) backend.PendingPoints {
	q.mu.Lock()
	q.queued++
	q.mu.Unlock()
	return queuedWait(func() ([]float32, []int32, error) { return q.Unproject(depth, conf, u) })
}

type queuedWait func() ([]float32, []int32, error)

func (w queuedWait) Wait() ([]float32, []int32, error) { return w() }

// The node on the real engine in the streaming schedule, with a backend
// that makes keyframes' points on the "device" and queues them: with
// overlap_frames it publishes every message it publishes without (poses,
// depth images, clouds from the engine's points), the last frames handed
// out when no next frame comes, and the frames' points were queued ahead.
func TestNodeOverlapFramesDevicePoints(t *testing.T) {
	const total = 12
	run := func(overlap bool) (*nodetest.Transport, int) {
		cfg := goldenNodeConfig(t)
		cfg.Engine.OverlapFrames = overlap
		cfg.ConfThreshold, cfg.CloudStride = 1, 2
		tr := nodetest.New("/lbm", nil)
		var qp *queuedPoints
		n, err := node.New(node.Options{Config: cfg, Transport: tr, Log: slog.New(slog.DiscardHandler),
			NewStream: func(ctx context.Context, c node.Config) (engine.Stream, error) {
				return engine.New(ctx, c.Engine, func(ec engine.Config) (backend.Backend, error) {
					be, err := cpuFactory(ec)
					qp = &queuedPoints{Backend: be}
					return qp, err
				}, nil)
			}})
		if err != nil {
			t.Fatal(err)
		}
		stop := runNode(t, n, tr)
		defer func() {
			if err := stop(); err != nil {
				t.Error(err)
			}
		}()
		for i := range total {
			if err := tr.Deliver("/image", frame(i, 70, 42, "cam"), nil); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "the path to hold every pose", 30*time.Second, func() bool {
			p, _ := tr.Last("/lbm/path").(*nav_msgs.Path)
			return p != nil && len(p.Poses) == total
		})
		waitFor(t, "every depth image", 30*time.Second, func() bool { return len(tr.Messages("/lbm/depth")) == total })
		clouds := len(tr.Messages("/lbm/cloud"))
		waitDiag(t, tr, map[string]string{"points_device_frames": strconv.Itoa(clouds), "points_host_frames": "0"})
		qp.mu.Lock()
		defer qp.mu.Unlock()
		return tr, qp.queued
	}
	off, queuedOff := run(false)
	on, queuedOn := run(true)
	if queuedOff != 0 || queuedOn == 0 {
		t.Fatalf("points queued ahead: %d without overlap_frames, %d with", queuedOff, queuedOn)
	}
	for _, topic := range []string{"/lbm/pose", "/lbm/depth", "/lbm/cloud"} {
		a, b := on.Messages(topic), off.Messages(topic)
		if len(a) != len(b) || len(b) == 0 {
			t.Fatalf("%s: %d messages with overlap_frames, %d without", topic, len(a), len(b))
		}
		for i := range b {
			if !reflect.DeepEqual(a[i], b[i]) {
				t.Fatalf("%s: message %d differs with overlap_frames", topic, i)
			}
		}
	}
	t.Logf("%d frames, %d clouds, %d frames' points queued ahead", total, len(on.Messages("/lbm/cloud")), queuedOn)
}
