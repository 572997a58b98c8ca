package node

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
)

// Policy says what the frame queue does when the model is slower than the camera.
type Policy int

const (
	// PolicyLatest drops the oldest waiting frame (counted) to keep latency low.
	PolicyLatest Policy = iota
	// PolicyAll blocks the subscriber so that every frame reaches the model.
	PolicyAll
)

func (p Policy) String() string {
	if p == PolicyAll {
		return "all"
	}
	return "latest"
}

// ParsePolicy reads "latest" or "all".
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "latest":
		return PolicyLatest, nil
	case "all":
		return PolicyAll, nil
	}
	return 0, fmt.Errorf("unknown queue policy %q (want latest or all)", s)
}

// queuedFrame is a decoded input waiting for the model, with what the
// publishers need to know about its message.
type queuedFrame struct {
	frame    engine.Frame
	frameID  string
	received time.Time
}

// frameQueue is the bounded hand-off between subscriber callbacks and the
// engine goroutine.
type frameQueue struct {
	ch      chan queuedFrame
	policy  Policy
	dropped atomic.Int64
}

func newFrameQueue(size int, p Policy) *frameQueue {
	return &frameQueue{ch: make(chan queuedFrame, size), policy: p}
}

// Push adds a frame. With PolicyAll it waits for room until ctx ends; with
// PolicyLatest it never waits and drops the oldest frame instead.
func (q *frameQueue) Push(ctx context.Context, f queuedFrame) error {
	if q.policy == PolicyAll {
		select {
		case q.ch <- f:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for {
		select {
		case q.ch <- f:
			return nil
		default:
		}
		select {
		case <-q.ch:
			q.dropped.Add(1)
		default:
		}
	}
}

// Pop waits for the next frame until ctx ends.
func (q *frameQueue) Pop(ctx context.Context) (queuedFrame, error) {
	select {
	case f := <-q.ch:
		return f, nil
	case <-ctx.Done():
		return queuedFrame{}, ctx.Err()
	}
}

// TryPop returns a waiting frame without blocking.
func (q *frameQueue) TryPop() (queuedFrame, bool) {
	select {
	case f := <-q.ch:
		return f, true
	default:
		return queuedFrame{}, false
	}
}

// Drain discards the waiting frames and says how many there were.
func (q *frameQueue) Drain() int {
	n := 0
	for {
		if _, ok := q.TryPop(); !ok {
			return n
		}
		n++
	}
}

func (q *frameQueue) Len() int       { return len(q.ch) }
func (q *frameQueue) Cap() int       { return cap(q.ch) }
func (q *frameQueue) Dropped() int64 { return q.dropped.Load() }
