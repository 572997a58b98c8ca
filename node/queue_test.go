package node

import (
	"context"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
)

func qf(seq uint64) queuedFrame { return queuedFrame{frame: engine.Frame{Seq: seq}} }

func TestQueueLatestDropsOldest(t *testing.T) {
	q := newFrameQueue(2, PolicyLatest)
	ctx := context.Background()
	for i := range uint64(5) {
		if err := q.Push(ctx, qf(i)); err != nil {
			t.Fatal(err)
		}
	}
	if q.Dropped() != 3 || q.Len() != 2 {
		t.Fatalf("dropped %d len %d, want 3 and 2", q.Dropped(), q.Len())
	}
	for _, want := range []uint64{3, 4} {
		f, err := q.Pop(ctx)
		if err != nil || f.frame.Seq != want {
			t.Fatalf("Pop = %d, %v; want %d", f.frame.Seq, err, want)
		}
	}
}

func TestQueueAllBlocksUntilRoom(t *testing.T) {
	q := newFrameQueue(1, PolicyAll)
	ctx := context.Background()
	if err := q.Push(ctx, qf(0)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- q.Push(ctx, qf(1)) }()
	select {
	case <-done:
		t.Fatal("Push into a full 'all' queue returned before there was room")
	case <-time.After(50 * time.Millisecond):
	}
	if f, _ := q.Pop(ctx); f.frame.Seq != 0 {
		t.Fatalf("Pop = %d, want 0", f.frame.Seq)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if f, _ := q.Pop(ctx); f.frame.Seq != 1 || q.Dropped() != 0 {
		t.Fatalf("Pop = %d, dropped %d; want 1 and 0", f.frame.Seq, q.Dropped())
	}
	// A blocked Push ends with its context (a closing session).
	_ = q.Push(ctx, qf(2))
	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	if err := q.Push(cctx, qf(3)); err == nil {
		t.Fatal("Push did not end with its context")
	}
	if n := q.Drain(); n != 1 {
		t.Fatalf("Drain = %d, want 1", n)
	}
}
