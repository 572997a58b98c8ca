package node_test

import (
	"strconv"
	"testing"
)

// /diagnostics' queue_length is the input queue that queue_size bounds,
// never more than queue_capacity; the frames taken and not yet finished
// (in the queue, being prepared, in the model) are frames_in_flight. It
// once showed queue_length 9 with queue_capacity 4: it counted every frame
// in flight.
func TestDiagnosticsQueueLength(t *testing.T) {
	g := newGated(t)
	w, h := g.Size()
	cfg := fastConfig(t)
	cfg.QueuePolicy, cfg.QueueSize = "latest", 4
	c := startCore(t, cfg, g, nil, "/image")
	t.Cleanup(g.open) // before the node stops, should a check fail
	deliver := func(from, to int) {
		for i := from; i < to; i++ {
			if err := c.tr.Deliver("/image", frame(i, w, h, "cam"), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	// three frames fill the line to the held model (one in it, two
	// prepared for it); the queue is empty
	deliver(0, 3)
	waitDiag(t, c.tr, map[string]string{"frames_received": "3", "queue_length": "0", "frames_in_flight": "3"})
	// thirteen more: four wait in the queue, the older nine are dropped
	const n = 16
	deliver(3, n)
	d := waitDiag(t, c.tr, map[string]string{"frames_received": strconv.Itoa(n)})
	for k, want := range map[string]string{"queue_length": "4", "queue_capacity": "4", "frames_in_flight": "7", "frames_dropped": "9"} {
		if got := diagValue(d, k); got != want {
			t.Errorf("%s %s, want %s: %v", k, got, want, d.Status[0].Values)
		}
	}
	g.open()
	waitDiag(t, c.tr, map[string]string{"frames_processed": "7", "queue_length": "0", "frames_in_flight": "0"})
}
