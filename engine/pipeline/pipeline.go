// Package pipeline runs camera frames through an engine.Stream in stages, so
// that the model never waits for the work around it: workers decode and
// preprocess frames ahead of the model, one goroutine runs the model, one
// goroutine hands each result at once to what must not wait (a Sink's
// Early: a pose), workers behind it do each result's own work (a Sink's
// Post: unprojection, image encoding, messages), and one goroutine adds the
// outputs to the Sink in frame order. Every hand-off is bounded: a slow sink
// holds the model back, which holds the input back, where the policy either
// blocks the producer or drops the oldest waiting frame. The node and the
// run command share it.
//
// A frame carries its caller's metadata M (the node's ROS header, run's
// input position) from Submit to its Output: every frame submitted comes
// out once, in order, with its metadata, whether it gave a result, failed,
// was dropped or was consumed without a result.
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
	// a worker is dropped (counted, and added to the sink in its place with
	// ErrDropped) to keep the latency low (cameras).
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

// ErrDropped is the Err of a frame DropOldest dropped (Stage "drop").
var ErrDropped = errors.New("pipeline: dropped for a newer frame")

// ErrNoResult is the Err of a frame the stream consumed without a result
// (Stage "none"): frames buffered for a phase 1 that a reset discarded.
var ErrNoResult = errors.New("pipeline: the stream gave no result for the frame")

// Input is one frame for the pipeline.
type Input[M any] struct {
	Seq   uint64
	Stamp time.Time
	// Image is the decoded frame; when nil, Decode is called on a worker.
	Image  image.Image
	Decode func() (image.Image, error)
	// Meta travels with the frame to its Output.
	Meta M
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
	// Latency runs from Arrived to the sink's Add.
	Latency time.Duration
}

// Config shapes a pipeline; zero values take the defaults.
type Config[M any] struct {
	// Workers decode and preprocess (default: min(4, GOMAXPROCS)).
	Workers int
	// PostWorkers run Post (default: half the cores, 1 to 8: a frame's
	// images and clouds can take longer than the model's frame).
	PostWorkers int
	// Queue is how many submitted frames may wait for a worker (default 4).
	Queue int
	// Ahead is how many prepared frames may wait for the model (default 2).
	Ahead int
	// Behind is how many results may wait between the model and the
	// sink's Add (default 16).
	Behind int
	Policy Policy
	// LockThread runs the model on one locked OS thread, for a backend that
	// wants its calls on one thread. The CPU backend's fork-join then parks
	// and wakes that thread on every operation, so it is off by default.
	LockThread bool
	// Held are the frames a resumed stream already holds, with their
	// metadata (a saved session's Cut.Held): their results reach the sink
	// with it.
	Held []Held[M]
	Log  *slog.Logger
}

func (c Config[M]) withDefaults() Config[M] {
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
	Delivered int64 // outputs added with a result
	Failed    int64 // outputs added with an error (not a drop, not "none")
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
type item[M any] struct {
	in       Input[M]
	ctl      *control[M]
	dropped  bool // DropOldest dropped it: it passes the model as ErrDropped
	frame    engine.Frame
	err      error
	stage    string
	queued   time.Time // when a worker took it
	prepared time.Time
	prepDur  time.Duration
	done     chan struct{} // closed once prepared
}

// control is a Do waiting for its turn on the model's thread.
type control[M any] struct {
	fn    func(Cut[M]) error
	flush bool // Close's final flush
	reply chan error
}

// ticket is a result (or a barrier) on its way to the sink.
type ticket[M any] struct {
	out     Output[M]
	barrier chan struct{} // closed by the deliver goroutine when reached
	done    chan struct{} // closed once Post ran
	// Early's input (a copy: Post writes out meanwhile), value and end
	earlyIn   Output[M]
	earlyVal  any
	earlyDone chan struct{}
}

// pendingFrame is what the model's thread remembers of a frame until its
// output goes out: a pushed frame until its result comes, or a frame decided
// otherwise behind it (outputs leave in input order).
type pendingFrame[M any] struct {
	seq    uint64
	stamp  time.Time
	meta   M
	timing Timing
	// resumed: a frame the stream held when the pipeline started, with no
	// timing of its own
	resumed bool
	// out is set once the frame is decided without a result of the
	// stream's (an error, a drop): it goes out when the frames before it
	// have
	out *Output[M]
}

// Pipeline is a running frame path. Submit frames; Close ends it.
type Pipeline[M any] struct {
	cfg     Config[M]
	stream  engine.Stream
	sink    Sink[M]
	poster  Poster[M]       // nil: no post stage
	earlier Earlier[M]      // nil: no early stage
	prep    engine.Preparer // nil: Push preprocesses

	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	queue   []*item[M]    // waiting for a worker
	marks   int           // dropped frames in queue, which take no room
	wake    chan struct{} // the queue has an item
	room    chan struct{} // closed (and replaced) when the queue has room
	closing bool

	order chan *item[M] // in submission order, to the model
	// slots bound the items taken from the queue that the model has not
	// taken yet: with DropOldest only Ahead of them, so that a backlog stays
	// in the queue, where the newest frame displaces the oldest.
	slots   chan struct{}
	work    chan *item[M] // to the prepare workers
	results chan *ticket[M]
	post    chan *ticket[M]
	early   chan *ticket[M]

	submitted, dropped, delivered, failed, noResult atomic.Int64
	busy, waitIn, waitOut                           atomic.Int64 // nanoseconds

	wg       sync.WaitGroup
	finished chan struct{} // closed when the deliver goroutine ends
}

// New starts a pipeline from stream into sink. The pipeline owns the
// stream's calls until Close returns: use Do for anything else on it. ctx
// bounds the whole pipeline: once it ends, everything stops without
// flushing.
func New[M any](ctx context.Context, stream engine.Stream, sink Sink[M], cfg Config[M]) (*Pipeline[M], error) {
	if stream == nil {
		return nil, errors.New("pipeline: no stream")
	}
	if sink == nil {
		return nil, errors.New("pipeline: no sink")
	}
	cfg = cfg.withDefaults()
	p := &Pipeline[M]{
		cfg:      cfg,
		stream:   stream,
		sink:     sink,
		wake:     make(chan struct{}, 1),
		room:     make(chan struct{}),
		order:    make(chan *item[M], cfg.Workers+cfg.Ahead),
		slots:    make(chan struct{}, inFlight(cfg)),
		work:     make(chan *item[M], cfg.Workers),
		results:  make(chan *ticket[M], cfg.Behind),
		post:     make(chan *ticket[M], cfg.PostWorkers),
		early:    make(chan *ticket[M], cfg.Behind),
		finished: make(chan struct{}),
	}
	p.poster, _ = sink.(Poster[M])
	p.earlier, _ = sink.(Earlier[M])
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
func inFlight[M any](cfg Config[M]) int {
	if cfg.Policy == DropOldest {
		return cfg.Ahead
	}
	return cfg.Workers + cfg.Ahead
}

// Submit hands a frame to the pipeline. With Block it waits for room until
// ctx ends; with DropOldest it never waits.
func (p *Pipeline[M]) Submit(ctx context.Context, in Input[M]) error {
	if in.Arrived.IsZero() {
		in.Arrived = time.Now()
	}
	if in.Image == nil && in.Decode == nil {
		return fmt.Errorf("pipeline: frame %d has neither an image nor a decoder", in.Seq)
	}
	it := &item[M]{in: in, done: make(chan struct{})}
	for {
		p.mu.Lock()
		if p.closing {
			p.mu.Unlock()
			return ErrClosed
		}
		dropped := false
		if len(p.queue)-p.marks >= p.cfg.Queue && p.cfg.Policy == DropOldest {
			// the oldest frame goes; a Do waiting in the queue never does.
			// It keeps its place, without its image, so that its output
			// reaches the sink in order.
			for _, q := range p.queue {
				if q.ctl == nil && !q.dropped {
					q.dropped, dropped = true, true
					q.in.Image, q.in.Decode = nil, nil
					close(q.done)
					p.marks++
					break
				}
			}
		}
		if len(p.queue)-p.marks < p.cfg.Queue {
			p.queue = append(p.queue, it)
			p.mu.Unlock()
			p.submitted.Add(1)
			if dropped {
				p.dropped.Add(1)
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
func (p *Pipeline[M]) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Do runs fn on the model's thread once every frame submitted before it has
// been added to the sink, so that fn sees the stream and the sink's state
// at the same frame (a reset, a session snapshot). Frames submitted after
// Do wait for it.
func (p *Pipeline[M]) Do(ctx context.Context, fn func(Cut[M]) error) error {
	c := &control[M]{fn: fn, reply: make(chan error, 1)}
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

// Checkpoint runs the sink's Checkpoint as a Do: after every frame
// submitted before it, before every frame after it.
func (p *Pipeline[M]) Checkpoint(ctx context.Context) error {
	return p.Do(ctx, func(c Cut[M]) error { return p.sink.Checkpoint(ctx, c) })
}

func (p *Pipeline[M]) enqueueControl(c *control[M]) error {
	it := &item[M]{ctl: c, done: make(chan struct{})}
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
// stream (a last phase 1, windowed mode's held results), adds everything to
// the sink and stops the goroutines. If ctx ends first, the rest is
// abandoned. The stream and the sink are left open for their owner.
func (p *Pipeline[M]) Close(ctx context.Context) error {
	c := &control[M]{flush: true, reply: make(chan error, 1)}
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
func (p *Pipeline[M]) Stats() Stats {
	s := Stats{
		Submitted: p.submitted.Load(), Dropped: p.dropped.Load(),
		Delivered: p.delivered.Load(), Failed: p.failed.Load(), NoResult: p.noResult.Load(),
	}
	s.Waiting = max(s.Submitted-s.Dropped-s.Delivered-s.Failed-s.NoResult, 0)
	p.mu.Lock()
	for _, it := range p.queue {
		if it.ctl == nil && !it.dropped { // a dropped frame holds only its place
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
func (p *Pipeline[M]) dispatch() {
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
		if it.dropped {
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
func (p *Pipeline[M]) next() *item[M] {
	for {
		p.mu.Lock()
		var it *item[M]
		if len(p.queue) > 0 {
			it = p.queue[0]
			p.queue = p.queue[1:]
			if it.dropped {
				p.marks--
			} else {
				close(p.room)
				p.room = make(chan struct{})
			}
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
func (p *Pipeline[M]) prepareWorker() {
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
func (p *Pipeline[M]) model() {
	defer p.wg.Done()
	defer close(p.early)
	defer close(p.post)
	defer close(p.results)
	if p.cfg.LockThread {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	pending := make([]pendingFrame[M], 0, len(p.cfg.Held))
	for _, h := range p.cfg.Held {
		pending = append(pending, pendingFrame[M]{seq: h.Seq, stamp: h.Stamp, meta: h.Meta, resumed: true})
	}
	since := func(n *atomic.Int64, t time.Time) { n.Add(int64(time.Since(t))) }
	idler, _ := p.stream.(engine.Idler)
	drainer, _ := p.stream.(engine.Drainer)
	// drain hands out a frame the stream holds ahead of the next one
	// (engine.Config.OverlapFrames) when no next frame is at hand
	drain := func() bool {
		if drainer == nil {
			return true
		}
		t := time.Now()
		res, err := drainer.Drain(p.ctx)
		d := time.Since(t)
		p.busy.Add(int64(d))
		pending = p.emit(res, pending, d)
		if err != nil {
			if p.ctx.Err() != nil {
				return false
			}
			// the held frame, the first still without an output
			for i := range pending {
				if pf := &pending[i]; pf.out == nil {
					pf.timing.Model = d
					pf.out = &Output[M]{Seq: pf.seq, Stamp: pf.stamp, Meta: pf.meta, Err: err, Stage: "model", Timing: pf.timing}
					break
				}
			}
			pending = p.drain(pending)
		}
		return true
	}
	var next uint64 // Cut.Next
	for {
		var it *item[M]
		ok := true
		select {
		case it, ok = <-p.order:
		default:
			// no frame waits: a frame held ahead comes out, and a slice
			// of the stream's background work (the next live window's
			// warm-up) runs now, once per gap so that a frame arriving
			// meanwhile waits for one slice at most
			if !drain() {
				return
			}
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
			if !drain() {
				return
			}
			t = time.Now()
			ok := p.barrier()
			since(&p.waitOut, t)
			if !ok {
				return
			}
			if !it.ctl.flush {
				t = time.Now()
				err := it.ctl.fn(Cut[M]{Stream: p.stream, Held: held(pending), Next: next})
				since(&p.busy, t)
				it.ctl.reply <- err
				continue
			}
			t = time.Now()
			res, err := p.stream.Flush(p.ctx)
			d := time.Since(t)
			p.busy.Add(int64(d))
			if err == nil {
				pending = p.emit(res, pending, d)
				// what the flush left without a result never gets one
				p.sendUpTo(pending, len(pending))
				pending = nil
			}
			if err == nil && !p.barrier() {
				err = p.ctx.Err()
			}
			it.ctl.reply <- err
			return
		}
		next = it.in.Seq + 1
		tm := Timing{Arrived: it.in.Arrived, Queue: it.queued.Sub(it.in.Arrived), Prepare: it.prepDur}
		if it.dropped || it.err != nil {
			out := Output[M]{Seq: it.in.Seq, Stamp: it.in.Stamp, Meta: it.in.Meta, Err: it.err, Stage: it.stage, Timing: tm}
			if it.dropped {
				out.Err, out.Stage, out.Timing = ErrDropped, "drop", Timing{Arrived: it.in.Arrived}
			}
			// behind the frames the stream still holds, in its place
			pending = p.drain(append(pending, pendingFrame[M]{seq: out.Seq, out: &out}))
			continue
		}
		start := time.Now()
		tm.Ahead = start.Sub(it.prepared)
		pending = append(pending, pendingFrame[M]{seq: it.in.Seq, stamp: it.in.Stamp, meta: it.in.Meta, timing: tm})
		res, err := p.stream.Push(p.ctx, it.frame)
		d := time.Since(start)
		p.busy.Add(int64(d))
		pending = p.emit(res, pending, d)
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			// the failed frame gets its error in its place; frames before it
			// still wait for their results
			for i := len(pending) - 1; i >= 0; i-- {
				if pf := &pending[i]; pf.seq == it.in.Seq && pf.out == nil {
					pf.timing.Model = d
					pf.out = &Output[M]{Seq: pf.seq, Stamp: pf.stamp, Meta: pf.meta, Err: err, Stage: "model", Timing: pf.timing}
					break
				}
			}
			pending = p.drain(pending)
		}
	}
}

// emit sends results on, matching each to its frame: results come in input
// order, so frames before a result's own that are still pending never get
// one (they go out as ErrNoResult in their place).
func (p *Pipeline[M]) emit(res []engine.Result, pending []pendingFrame[M], d time.Duration) []pendingFrame[M] {
	for i := range res {
		r := &res[i]
		j := 0
		for j < len(pending) && (pending[j].seq != r.Seq || pending[j].out != nil) {
			j++
		}
		var pf pendingFrame[M]
		if j < len(pending) {
			p.sendUpTo(pending, j)
			pf = pending[j]
			pending = pending[j+1:]
		} else {
			// a result for a frame the stream held before the pipeline
			// knew of it, without Config.Held: no metadata
			pf = pendingFrame[M]{seq: r.Seq, stamp: r.Stamp, resumed: true}
		}
		if pf.resumed {
			// a resumed session's held frame: no timing of its own
			pf.timing = Timing{Arrived: time.Now()}
		}
		pf.timing.Model = d
		p.send(&ticket[M]{out: Output[M]{Seq: r.Seq, Stamp: r.Stamp, Meta: pf.meta, Result: r, Timing: pf.timing}})
		pending = p.drain(pending)
	}
	return pending
}

// sendUpTo sends the first n pending frames, which will get no result: the
// decided ones with their outputs, the rest as ErrNoResult.
func (p *Pipeline[M]) sendUpTo(pending []pendingFrame[M], n int) {
	for _, pf := range pending[:n] {
		if pf.out != nil {
			p.send(&ticket[M]{out: *pf.out})
			continue
		}
		p.noResult.Add(1)
		if pf.resumed {
			pf.timing = Timing{Arrived: time.Now()}
		}
		p.send(&ticket[M]{out: Output[M]{Seq: pf.seq, Stamp: pf.stamp, Meta: pf.meta, Err: ErrNoResult, Stage: "none", Timing: pf.timing}})
	}
}

// drain sends the decided frames at the head of pending: nothing before
// them waits any more.
func (p *Pipeline[M]) drain(pending []pendingFrame[M]) []pendingFrame[M] {
	n := 0
	for n < len(pending) && pending[n].out != nil {
		n++
	}
	p.sendUpTo(pending, n)
	return pending[n:]
}

// held lists the frames the stream holds for a Cut.
func held[M any](pending []pendingFrame[M]) []Held[M] {
	out := make([]Held[M], 0, len(pending))
	for _, pf := range pending {
		if pf.out == nil {
			out = append(out, Held[M]{Seq: pf.seq, Stamp: pf.stamp, Meta: pf.meta})
		}
	}
	return out
}

// send passes a ticket to Early, the post workers and the deliver goroutine.
func (p *Pipeline[M]) send(t *ticket[M]) bool {
	start := time.Now()
	defer func() { p.waitOut.Add(int64(time.Since(start))) }()
	t.done = make(chan struct{})
	t.earlyDone = make(chan struct{})
	if p.earlier == nil || t.out.Err != nil || t.out.Result == nil {
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
func (p *Pipeline[M]) barrier() bool {
	t := &ticket[M]{barrier: make(chan struct{}), done: make(chan struct{}), earlyDone: make(chan struct{})}
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

func (p *Pipeline[M]) postWorker() {
	defer p.wg.Done()
	for t := range p.post {
		if p.poster != nil && t.out.Err == nil && t.out.Result != nil {
			s := time.Now()
			v, err := p.poster.Post(t.out.Result, t.out.Meta)
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
func (p *Pipeline[M]) earlyWorker() {
	defer p.wg.Done()
	for t := range p.early {
		t.earlyVal = p.earlier.Early(t.earlyIn)
		close(t.earlyDone)
	}
}

func (p *Pipeline[M]) deliver() {
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
		switch {
		case t.out.Skipped(): // counted as dropped or without a result
		case t.out.Err != nil:
			p.failed.Add(1)
		default:
			p.delivered.Add(1)
		}
		p.sink.Add(t.out)
	}
}
