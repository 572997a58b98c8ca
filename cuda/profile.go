//go:build cuda

package cuda

import (
	"fmt"
	"log/slog"
	"sort"

	"gorgonia.org/cu"
)

// profile measures each operation's time on the device with a pair of CUDA
// events around it, without synchronising, so the stream runs as it does
// unprofiled. The time between one operation's end event and the next one's
// start event is device idle time: the GPU waited for the host (launch
// overhead, host work, a synchronising copy). Used only on the owner thread.
type profile struct {
	calls    map[string]int
	ms       map[string]float64
	idleMS   float64
	gapMS    map[string]float64 // idle time by the pair of ops around it
	gapN     map[string]int
	pending  []timedOp
	free     []cu.Event
	prevEnd  cu.Event // end event of the last resolved op, kept for the next gap
	prevOp   string
	havePrev bool
	err      error
}

type timedOp struct {
	op         string
	start, end cu.Event
}

// profileBatch bounds the events outstanding before they are resolved (one
// synchronisation per batch, far apart enough not to change the timing).
const profileBatch = 4096

func newProfile() *profile {
	return &profile{calls: map[string]int{}, ms: map[string]float64{}, gapMS: map[string]float64{}, gapN: map[string]int{}}
}

func (p *profile) event() (cu.Event, error) {
	if n := len(p.free); n > 0 {
		e := p.free[n-1]
		p.free = p.free[:n-1]
		return e, nil
	}
	return cu.MakeEvent(cu.DefaultEvent)
}

func (p *profile) wrap(op string, fn func() error) func() error {
	return func() error {
		if p.err != nil {
			return fn()
		}
		start, err := p.event()
		if err == nil {
			err = start.Record(cu.Stream{})
		}
		if err != nil {
			p.err = err
			return fn()
		}
		ferr := fn()
		end, err := p.event()
		if err == nil {
			err = end.Record(cu.Stream{})
		}
		if err != nil {
			p.err = err
			return ferr
		}
		p.pending = append(p.pending, timedOp{op, start, end})
		if len(p.pending) >= profileBatch {
			p.resolve()
		}
		return ferr
	}
}

// resolve waits for the pending events and adds up their times.
func (p *profile) resolve() {
	if len(p.pending) == 0 || p.err != nil {
		return
	}
	if err := p.pending[len(p.pending)-1].end.Synchronize(); err != nil {
		p.err = err
		return
	}
	for _, t := range p.pending {
		ms, err := t.start.Elapsed(t.end)
		if err != nil {
			p.err = err
			return
		}
		p.calls[t.op]++
		p.ms[t.op] += ms
		if p.havePrev {
			if gap, err := p.prevEnd.Elapsed(t.start); err == nil && gap > 0 {
				p.idleMS += float64(gap)
				pair := p.prevOp + " → " + t.op
				p.gapMS[pair] += float64(gap)
				p.gapN[pair]++
			}
			p.free = append(p.free, p.prevEnd)
		}
		p.free = append(p.free, t.start)
		p.prevEnd, p.prevOp, p.havePrev = t.end, t.op, true
	}
	p.pending = p.pending[:0]
}

// restart drops what was measured so far (the engine trims after phase 1,
// so a profile covers the streaming frames).
func (p *profile) restart() {
	p.resolve()
	clear(p.calls)
	clear(p.ms)
	clear(p.gapMS)
	clear(p.gapN)
	p.idleMS = 0
	if p.havePrev {
		p.free = append(p.free, p.prevEnd)
		p.havePrev = false
	}
}

// report logs the operations by total device time, largest first, then the
// idle time, and destroys the events.
func (p *profile) report(log *slog.Logger) error {
	p.resolve()
	if p.err != nil {
		log.Warn("cuda profile incomplete: an event failed", "err", p.err)
	}
	ops := make([]string, 0, len(p.ms))
	var busy float64
	for op, t := range p.ms {
		ops = append(ops, op)
		busy += t
	}
	sort.Slice(ops, func(i, j int) bool { return p.ms[ops[i]] > p.ms[ops[j]] })
	for _, op := range ops {
		log.Info("cuda profile", "op", op, "calls", p.calls[op], "device_ms", fmt.Sprintf("%.2f", p.ms[op]),
			"per_call_us", fmt.Sprintf("%.1f", 1000*p.ms[op]/float64(p.calls[op])),
			"share", fmt.Sprintf("%.1f%%", 100*p.ms[op]/max(busy, 1e-9)))
	}
	log.Info("cuda profile totals", "busy_ms", fmt.Sprintf("%.1f", busy), "idle_ms", fmt.Sprintf("%.1f", p.idleMS),
		"idle_share", fmt.Sprintf("%.1f%%", 100*p.idleMS/max(busy+p.idleMS, 1e-9)))
	// Where the device waited: the op pairs with the most idle time between them.
	pairs := make([]string, 0, len(p.gapMS))
	for k := range p.gapMS {
		pairs = append(pairs, k)
	}
	sort.Slice(pairs, func(i, j int) bool { return p.gapMS[pairs[i]] > p.gapMS[pairs[j]] })
	for _, k := range pairs[:min(len(pairs), 12)] {
		log.Info("cuda profile idle", "between", k, "times", p.gapN[k], "idle_ms", fmt.Sprintf("%.2f", p.gapMS[k]),
			"per_gap_us", fmt.Sprintf("%.1f", 1000*p.gapMS[k]/float64(p.gapN[k])))
	}
	if p.havePrev {
		p.free = append(p.free, p.prevEnd)
		p.havePrev = false
	}
	for i := range p.free {
		_ = cu.DestroyEvent(&p.free[i])
	}
	p.free = nil
	return nil
}
