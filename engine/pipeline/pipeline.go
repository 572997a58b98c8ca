// Package pipeline runs camera frames through an engine.Stream in stages, so
// that the model never waits for the work around it: workers decode and
// preprocess frames ahead of the model, one goroutine runs the model, one
// goroutine hands each result at once to what must not wait (Early: a pose),
// workers behind it do each result's own work (unprojection, image encoding,
// messages), and one goroutine delivers the results in frame order. Every
// hand-off is bounded: a slow consumer holds the model back, which holds the
// input back, where the policy either blocks the producer or drops the
// oldest waiting frame. The node and the run command share it.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"image"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
)

// Policy says what Submit does when the input queue is full.
type Policy int

const (
	// Block makes Submit wait for room: every frame is processed (files, bags).
	Block Policy = iota
	// DropOldest makes Submit never wait: the oldest frame still waiting for
	// a worker is dropped (counted, OnDrop) to keep the latency low (cameras).
	DropOldest
)

func (p Policy) String() string {
	if p == DropOldest {
		return "drop-oldest"
	}
	return "block"
}

// ErrClosed is returned by Submit and Do once Close has started.
var ErrClosed = errors.New("pipeline: closed")

// Input is one frame for the pipeline.
type Input struct {
	Seq   uint64
	Stamp time.Time
	// Image is the decoded frame; when nil, Decode is called on a worker.
	Image  image.Image
	Decode func() (image.Image, error)
	// Meta travels with the frame to its Output (the message's frame id...).
	Meta any
	// Arrived is when the frame reached the program, the start of its
	// latency; zero means when Submit was called.
	Arrived time.Time
}

// Timing is where one frame's time went. Model is the Push that produced the
// result: the frames of one phase-1 call share it.
type Timing struct {
	Arrived time.Time
	Queue   time.Duration // waiting for a worker
	Prepare time.Duration // decoding and preprocessing
	Ahead   time.Duration // prepared, waiting for the model
	Model   time.Duration
	Post    time.Duration
	// Latency runs from Arrived to the call of Deliver.
	Latency time.Duration
}

// Output is what Deliver gets for each frame, in input order: a result, or
// the error that stopped the frame.
type Output struct {
	Seq    uint64
	Stamp  time.Time
	Meta   any
	Result *engine.Result // nil when Err is set
	Value  any            // what Post returned
	Early  any            // what Early returned
	Err    error
	// Stage names where Err came from: "decode", "prepare", "model" or "post".
	Stage  string
	Timing Timing
}

// Config shapes a pipeline; zero values take the defaults.
type Config struct {
	// Workers decode and preprocess (default: min(4, GOMAXPROCS)).
	Workers int
	// PostWorkers run Post (default: half the cores, 1 to 8: a frame's
	// images and clouds can take longer than the model's frame).
	PostWorkers int
	// Queue is how many submitted frames may wait for a worker (default 4).
	Queue int
	// Ahead is how many prepared frames may wait for the model (default 2).
	Ahead int
	// Behind is how many results may wait between the model and Deliver
	// (default 16).
	Behind int
	Policy Policy
	// LockThread runs the model on one locked OS thread, for a backend that
	// wants its calls on one thread. The CPU backend's fork-join then parks
	// and wakes that thread on every operation, so it is off by default.
	LockThread bool
	// Post does a result's own work on a worker, off the model's thread, in
	// any order; its value reaches Deliver. Optional.
	Post func(r *engine.Result, meta any) (any, error)
	// Early gets every result in input order as soon as the model gave it,
	// before Post, on a goroutine of its own: for what must not wait for the
	// per-pixel work (a pose). Its value reaches Deliver, which waits for
	// it. Optional; it must not call Submit or Do.
	Early func(Output) any
	// Deliver gets every output in input order, one at a time. It must not
	// call Submit or Do (they may wait for Deliver).
	Deliver func(Output)
	// AfterPush runs on the model's thread after every Push, with the
	// stream (to read its Stats). Optional.
	AfterPush func(s engine.Stream, d time.Duration, err error)
	// OnDrop is told of each frame DropOldest dropped. Optional.
	OnDrop func(Input)
	Log    *slog.Logger
}

func (c Config) withDefaults() Config {
	n := min(4, runtime.GOMAXPROCS(0))
	if c.Workers <= 0 {
		c.Workers = n
	}
	if c.PostWorkers <= 0 {
		c.PostWorkers = min(8, max(1, runtime.GOMAXPROCS(0)/2))
	}
	if c.Queue <= 0 {
		c.Queue = 4
	}
	if c.Ahead <= 0 {
		c.Ahead = 2
	}
	if c.Behind <= 0 {
		c.Behind = 16
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return c
}

// Stats are the pipeline's counters.
type Stats struct {
	Submitted int64 // frames taken by Submit
	Dropped   int64 // frames DropOldest dropped
	Delivered int64 // outputs delivered with a result
	Failed    int64 // outputs delivered with an error
	// NoResult counts frames the stream consumed without a result (frames
	// buffered for a phase 1 that a reset discarded).
	NoResult int64
	// Waiting is the frames submitted but not yet delivered: queued, being
	// prepared, in the model (a phase 1 holds several) or after it.
	Waiting int64
	// Queued is the frames waiting for a worker in the input queue, the
	// part of Waiting that Config.Queue bounds.
	Queued int64
	// Where the model's goroutine spent its time: in the stream's calls
	// (Push, Flush, Do's functions), waiting for a prepared frame, and held
	// back by the stages behind it (a full results line, a Do's barrier).
	// Busy well below the wall time with Input low means the stages after
	// the model limit the throughput.
	ModelBusy, ModelInput, ModelOutput time.Duration
}

// item is a frame (or a Do) on its way to the model.
type item struct {
	in       Input
	ctl      *control
	frame    engine.Frame
	err      error
	stage    string
	queued   time.Time // when a worker took it
	prepared time.Time
	prepDur  time.Duration
	done     chan struct{} // closed once prepared
}

// control is a Do waiting for its turn on the model's thread.
type control struct {
	fn    func(engine.Stream) error
	flush bool // Close's final flush
	reply chan error
}

// ticket is a result (or a barrier) on its way to Deliver.
type ticket struct {
	out     Output
	barrier chan struct{} // closed by the deliver goroutine when reached
	done    chan struct{} // closed once Post ran
	// Early's input (a copy: Post writes out meanwhile), value and end
	earlyIn   Output
	earlyVal  any
	earlyDone chan struct{}
}

// pendingFrame is what the model's thread remembers of a pushed frame until
// its result comes out.
type pendingFrame struct {
	seq    uint64
	stamp  time.Time
	meta   any
	timing Timing
}

// Pipeline is a running frame path. Submit frames; Close ends it.
type Pipeline struct {
	cfg    Config
	stream engine.Stream
	prep   engine.Preparer // nil: Push preprocesses

	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	queue   []*item       // waiting for a worker
	wake    chan struct{} // the queue has an item
	room    chan struct{} // closed (and replaced) when the queue has room
	closing bool

	order chan *item // in submission order, to the model
	// slots bound the items taken from the queue that the model has not
	// taken yet: with DropOldest only Ahead of them, so that a backlog stays
	// in the queue, where the newest frame displaces the oldest.
	slots   chan struct{}
	work    chan *item // to the prepare workers
	results chan *ticket
	post    chan *ticket
	early   chan *ticket

	submitted, dropped, delivered, failed, noResult atomic.Int64
	busy, waitIn, waitOut                           atomic.Int64 // nanoseconds

	wg       sync.WaitGroup
	finished chan struct{} // closed when the deliver goroutine ends
}

// New starts a pipeline over stream. The pipeline owns the stream's calls
// until Close returns: use Do for anything else on it. ctx bounds the whole
// pipeline: once it ends, everything stops without flushing.
func New(ctx context.Context, stream engine.Stream, cfg Config) (*Pipeline, error) {
	if stream == nil {
		return nil, errors.New("pipeline: no stream")
	}
	if cfg.Deliver == nil {
		return nil, errors.New("pipeline: no Deliver function")
	}
	cfg = cfg.withDefaults()
	p := &Pipeline{
		cfg:      cfg,
		stream:   stream,
		wake:     make(chan struct{}, 1),
		room:     make(chan struct{}),
		order:    make(chan *item, cfg.Workers+cfg.Ahead),
		slots:    make(chan struct{}, inFlight(cfg)),
		work:     make(chan *item, cfg.Workers),
		results:  make(chan *ticket, cfg.Behind),
		post:     make(chan *ticket, cfg.PostWorkers),
		early:    make(chan *ticket, cfg.Behind),
		finished: make(chan struct{}),
	}
	p.prep, _ = stream.(engine.Preparer)
	p.ctx, p.cancel = context.WithCancel(ctx)
	p.wg.Add(4 + cfg.Workers + cfg.PostWorkers)
	go p.dispatch()
	for range cfg.Workers {
		go p.prepareWorker()
	}
	go p.model()
	for range cfg.PostWorkers {
		go p.postWorker()
	}
	go p.earlyWorker()
	go p.deliver()
	return p, nil
}

// inFlight is how many items may be between the queue and the model: enough
// for every worker and Ahead more with Block; with DropOldest only Ahead, so
// that no frame waits for the model where it cannot be dropped for a newer.
func inFlight(cfg Config) int {
	if cfg.Policy == DropOldest {
		return cfg.Ahead
	}
	return cfg.Workers + cfg.Ahead
}

// Submit hands a frame to the pipeline. With Block it waits for room until
// ctx ends; with DropOldest it never waits.
func (p *Pipeline) Submit(ctx context.Context, in Input) error {
	if in.Arrived.IsZero() {
		in.Arrived = time.Now()
	}
	if in.Image == nil && in.Decode == nil {
		return fmt.Errorf("pipeline: frame %d has neither an image nor a decoder", in.Seq)
	}
	it := &item{in: in, done: make(chan struct{})}
	for {
		p.mu.Lock()
		if p.closing {
			p.mu.Unlock()
			return ErrClosed
		}
		var dropped *item
		if len(p.queue) >= p.cfg.Queue && p.cfg.Policy == DropOldest {
			// the oldest frame goes; a Do waiting in the queue never does
			for i, q := range p.queue {
				if q.ctl == nil {
					dropped = q
					p.queue = append(p.queue[:i], p.queue[i+1:]...)
					break
				}
			}
		}
		if len(p.queue) < p.cfg.Queue || dropped != nil {
			p.queue = append(p.queue, it)
			p.mu.Unlock()
			p.submitted.Add(1)
			if dropped != nil {
				p.dropped.Add(1)
				if p.cfg.OnDrop != nil {
					p.cfg.OnDrop(dropped.in)
				}
			}
			p.signal()
			return nil
		}
		room := p.room
		p.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		case <-p.ctx.Done():
			return p.ctx.Err()
		}
	}
}

// signal tells the dispatcher that the queue has an item.
func (p *Pipeline) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Do runs fn on the model's thread once every frame submitted before it has
// been delivered, so that fn sees the stream and the consumer's state at
// the same frame (a session snapshot, a reset, a checkpoint). Frames
// submitted after Do wait for it.
func (p *Pipeline) Do(ctx context.Context, fn func(engine.Stream) error) error {
	c := &control{fn: fn, reply: make(chan error, 1)}
	if err := p.enqueueControl(c); err != nil {
		return err
	}
	select {
	case err := <-c.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-p.ctx.Done():
		return p.ctx.Err()
	}
}

func (p *Pipeline) enqueueControl(c *control) error {
	it := &item{ctl: c, done: make(chan struct{})}
	close(it.done)
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return ErrClosed
	}
	if c.flush {
		p.closing = true
	}
	p.queue = append(p.queue, it)
	p.mu.Unlock()
	p.signal()
	return nil
}

// Close stops taking frames, runs the ones already submitted, flushes the
// stream (a last phase 1, windowed mode's held results), delivers everything
// and stops the goroutines. If ctx ends first, the rest is abandoned. The
// stream is left open for its owner.
func (p *Pipeline) Close(ctx context.Context) error {
	c := &control{flush: true, reply: make(chan error, 1)}
	err := p.enqueueControl(c)
	if err == nil {
		select {
		case err = <-c.reply:
		case <-ctx.Done():
			err = ctx.Err()
		case <-p.ctx.Done():
			err = p.ctx.Err()
		}
	}
	p.cancel()
	p.wg.Wait()
	if errors.Is(err, ErrClosed) {
		return nil // closed before
	}
	return err
}

// Stats returns the counters.
func (p *Pipeline) Stats() Stats {
	s := Stats{
		Submitted: p.submitted.Load(), Dropped: p.dropped.Load(),
		Delivered: p.delivered.Load(), Failed: p.failed.Load(), NoResult: p.noResult.Load(),
	}
	s.Waiting = max(s.Submitted-s.Dropped-s.Delivered-s.Failed-s.NoResult, 0)
	p.mu.Lock()
	for _, it := range p.queue {
		if it.ctl == nil {
			s.Queued++
		}
	}
	p.mu.Unlock()
	s.ModelBusy = time.Duration(p.busy.Load())
	s.ModelInput = time.Duration(p.waitIn.Load())
	s.ModelOutput = time.Duration(p.waitOut.Load())
	return s
}

// dispatch moves queued items, in order, to the model's line and the workers.
func (p *Pipeline) dispatch() {
	defer p.wg.Done()
	defer close(p.work)
	defer close(p.order)
	for {
		// a place on the model's line first: what waits for one stays
		// droppable in the queue
		select {
		case p.slots <- struct{}{}:
		case <-p.ctx.Done():
			return
		}
		it := p.next()
		if it == nil {
			return
		}
		it.queued = time.Now()
		select {
		case p.order <- it:
		case <-p.ctx.Done():
			return
		}
		if it.ctl != nil {
			if it.ctl.flush {
				return
			}
			continue
		}
		select {
		case p.work <- it:
		case <-p.ctx.Done():
			return
		}
	}
}

// next takes the oldest queued item, waiting for one; nil when the
// pipeline ends.
func (p *Pipeline) next() *item {
	for {
		p.mu.Lock()
		var it *item
		if len(p.queue) > 0 {
			it = p.queue[0]
			p.queue = p.queue[1:]
			close(p.room)
			p.room = make(chan struct{})
		}
		p.mu.Unlock()
		if it != nil {
			return it
		}
		select {
		case <-p.wake:
		case <-p.ctx.Done():
			return nil
		}
	}
}

// prepareWorker decodes and preprocesses frames.
func (p *Pipeline) prepareWorker() {
	defer p.wg.Done()
	for it := range p.work {
		t := time.Now()
		img := it.in.Image
		if img == nil {
			var err error
			if img, err = it.in.Decode(); err == nil && img == nil {
				err = errors.New("the decoder returned no image")
			}
			if err != nil {
				it.err, it.stage = err, "decode"
			}
		}
		if it.err == nil {
			b := img.Bounds()
			f := engine.Frame{Seq: it.in.Seq, Stamp: it.in.Stamp, Image: img, Width: b.Dx(), Height: b.Dy()}
			if p.prep != nil {
				var err error
				if f, err = p.prep.Prepare(f); err != nil {
					it.err, it.stage = err, "prepare"
				}
			}
			it.frame = f
		}
		it.prepared = time.Now()
		it.prepDur = it.prepared.Sub(t)
		close(it.done)
	}
}

// model runs the stream, in submission order (on one locked OS thread with
// LockThread).
func (p *Pipeline) model() {
	defer p.wg.Done()
	defer close(p.early)
	defer close(p.post)
	defer close(p.results)
	if p.cfg.LockThread {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	var pending []pendingFrame
	since := func(n *atomic.Int64, t time.Time) { n.Add(int64(time.Since(t))) }
	idler, _ := p.stream.(engine.Idler)
	for {
		var it *item
		ok := true
		select {
		case it, ok = <-p.order:
		default:
			// no frame waits: a slice of the stream's background work
			// (the next live window's warm-up) runs now, once per gap so
			// that a frame arriving meanwhile waits for one slice at most
			if idler != nil {
				t := time.Now()
				idler.Idle(p.ctx)
				since(&p.busy, t)
			}
		}
		t := time.Now()
		if it == nil && ok {
			it, ok = <-p.order
		}
		if !ok {
			return
		}
		<-p.slots // the dispatcher may take the next item from the queue
		select {
		case <-it.done:
		case <-p.ctx.Done():
			return
		}
		since(&p.waitIn, t)
		if it.ctl != nil {
			t = time.Now()
			ok := p.barrier()
			since(&p.waitOut, t)
			if !ok {
				return
			}
			if !it.ctl.flush {
				t = time.Now()
				err := it.ctl.fn(p.stream)
				since(&p.busy, t)
				it.ctl.reply <- err
				continue
			}
			t = time.Now()
			res, err := p.stream.Flush(p.ctx)
			d := time.Since(t)
			p.busy.Add(int64(d))
			if p.cfg.AfterPush != nil {
				p.cfg.AfterPush(p.stream, d, err)
			}
			if err == nil {
				pending = p.emit(res, pending, d)
			}
			if err == nil && !p.barrier() {
				err = p.ctx.Err()
			}
			it.ctl.reply <- err
			return
		}
		tm := Timing{Arrived: it.in.Arrived, Queue: it.queued.Sub(it.in.Arrived), Prepare: it.prepDur}
		if it.err != nil {
			p.send(&ticket{out: Output{Seq: it.in.Seq, Stamp: it.in.Stamp, Meta: it.in.Meta, Err: it.err, Stage: it.stage, Timing: tm}})
			continue
		}
		start := time.Now()
		tm.Ahead = start.Sub(it.prepared)
		pending = append(pending, pendingFrame{seq: it.in.Seq, stamp: it.in.Stamp, meta: it.in.Meta, timing: tm})
		res, err := p.stream.Push(p.ctx, it.frame)
		d := time.Since(start)
		p.busy.Add(int64(d))
		if p.cfg.AfterPush != nil {
			p.cfg.AfterPush(p.stream, d, err)
		}
		pending = p.emit(res, pending, d)
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			// the failed frame gets its error in its place; frames before it
			// still wait for their results
			for i := len(pending) - 1; i >= 0; i-- {
				if pending[i].seq == it.in.Seq {
					pf := pending[i]
					pending = append(pending[:i], pending[i+1:]...)
					pf.timing.Model = d
					p.send(&ticket{out: Output{Seq: pf.seq, Stamp: pf.stamp, Meta: pf.meta, Err: err, Stage: "model", Timing: pf.timing}})
					break
				}
			}
		}
	}
}

// emit sends results on, matching each to its frame: results come in input
// order, so frames before a result's own that are still pending never get
// one.
func (p *Pipeline) emit(res []engine.Result, pending []pendingFrame, d time.Duration) []pendingFrame {
	for i := range res {
		r := &res[i]
		j := 0
		for j < len(pending) && pending[j].seq != r.Seq {
			j++
		}
		var pf pendingFrame
		if j < len(pending) {
			p.noResult.Add(int64(j))
			pf = pending[j]
			pending = pending[j+1:]
		} else {
			// a result for a frame pushed before a Do (a resumed session's
			// held results): it has no timing of its own
			pf = pendingFrame{seq: r.Seq, stamp: r.Stamp, timing: Timing{Arrived: time.Now()}}
		}
		pf.timing.Model = d
		p.send(&ticket{out: Output{Seq: r.Seq, Stamp: r.Stamp, Meta: pf.meta, Result: r, Timing: pf.timing}})
	}
	return pending
}

// send passes a ticket to Early, the post workers and the deliver goroutine.
func (p *Pipeline) send(t *ticket) bool {
	start := time.Now()
	defer func() { p.waitOut.Add(int64(time.Since(start))) }()
	t.done = make(chan struct{})
	t.earlyDone = make(chan struct{})
	if p.cfg.Early == nil || t.out.Err != nil || t.out.Result == nil {
		close(t.earlyDone)
	} else {
		t.earlyIn = t.out
		select {
		case p.early <- t:
		case <-p.ctx.Done():
			return false
		}
	}
	select {
	case p.results <- t:
	case <-p.ctx.Done():
		return false
	}
	select {
	case p.post <- t:
	case <-p.ctx.Done():
		return false
	}
	return true
}

// barrier waits until everything sent before it has been delivered.
func (p *Pipeline) barrier() bool {
	t := &ticket{barrier: make(chan struct{}), done: make(chan struct{}), earlyDone: make(chan struct{})}
	close(t.done)
	close(t.earlyDone)
	select {
	case p.results <- t:
	case <-p.ctx.Done():
		return false
	}
	select {
	case <-t.barrier:
		return true
	case <-p.ctx.Done():
		return false
	}
}

func (p *Pipeline) postWorker() {
	defer p.wg.Done()
	for t := range p.post {
		if p.cfg.Post != nil && t.out.Err == nil && t.out.Result != nil {
			s := time.Now()
			v, err := p.cfg.Post(t.out.Result, t.out.Meta)
			t.out.Timing.Post = time.Since(s)
			if err != nil {
				t.out.Err, t.out.Stage = err, "post"
			} else {
				t.out.Value = v
			}
		}
		close(t.done)
	}
}

// earlyWorker runs Early in frame order.
func (p *Pipeline) earlyWorker() {
	defer p.wg.Done()
	for t := range p.early {
		t.earlyVal = p.cfg.Early(t.earlyIn)
		close(t.earlyDone)
	}
}

func (p *Pipeline) deliver() {
	defer p.wg.Done()
	defer close(p.finished)
	for t := range p.results {
		for _, c := range []chan struct{}{t.done, t.earlyDone} {
			select {
			case <-c:
			case <-p.ctx.Done():
				return
			}
		}
		t.out.Early = t.earlyVal
		if t.barrier != nil {
			close(t.barrier)
			continue
		}
		t.out.Timing.Latency = time.Since(t.out.Timing.Arrived)
		if t.out.Err != nil {
			p.failed.Add(1)
		} else {
			p.delivered.Add(1)
		}
		p.cfg.Deliver(t.out)
	}
}
