package pipeline

import (
	"context"
	"errors"
	"image"
	"image/color"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/cpu"
)

// tinyStream is the tiny random model on the CPU backend: the real engine.
func tinyStream(t *testing.T) engine.Stream {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.ImageWidth = 70
	cfg.ScaleFrames = 3
	cfg.SlidingWindow = 4
	cfg.Threads = 1
	st, err := engine.New(context.Background(), cfg, func(c engine.Config) (backend.Backend, error) {
		return cpu.New(cpu.Config{Threads: c.Threads}), nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func testImage(seed int) image.Image {
	img := image.NewRGBA(image.Rect(0, 0, 140, 84))
	for y := range 84 {
		for x := range 140 {
			img.Set(x, y, color.RGBA{uint8(x*3 + seed), uint8(y*5) ^ uint8(seed), uint8(seed * 7), 255})
		}
	}
	return img
}

// collector gathers the outputs added to it: those of frames that reached
// the model (outs) and the dropped ones and those without a result apart
// (skipped); all holds every output in the order added.
type collector struct {
	mu      sync.Mutex
	outs    []Output[int]
	skipped []Output[int]
	all     []Output[int]
}

func (c *collector) deliver(o Output[int]) {
	c.mu.Lock()
	if o.Skipped() {
		c.skipped = append(c.skipped, o)
	} else {
		c.outs = append(c.outs, o)
	}
	c.all = append(c.all, o)
	c.mu.Unlock()
}

func (c *collector) get() []Output[int] {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.outs)
}

// testSink is a Sink made of functions: add (default: nothing), post and
// early when set, checkpoint.
type testSink struct {
	add        func(Output[int])
	post       func(*engine.Result, int) (any, error)
	early      func(Output[int]) any
	checkpoint func(context.Context, Cut[int]) error
}

func (s *testSink) Add(o Output[int]) {
	if s.add != nil {
		s.add(o)
	}
}

func (s *testSink) Checkpoint(ctx context.Context, c Cut[int]) error {
	if s.checkpoint != nil {
		return s.checkpoint(ctx, c)
	}
	return nil
}

func (s *testSink) Close(context.Context) error { return nil }

// postSink adds a Post stage to a testSink; earlySink an Early one too.
type postSink struct{ *testSink }

func (s postSink) Post(r *engine.Result, m int) (any, error) { return s.post(r, m) }

type earlySink struct{ postSink }

func (s earlySink) Early(o Output[int]) any { return s.early(o) }

// The pipeline gives the results Push gives frame by frame, in order, with
// undecodable frames reported in their place and the rest unaffected.
func TestOrderAndResultsMatchSerial(t *testing.T) {
	const n = 9
	serial := tinyStream(t)
	var want []engine.Result
	for i := range n {
		if i == 4 {
			continue // the broken frame
		}
		res, err := serial.Push(context.Background(), engine.Frame{Seq: uint64(i), Image: testImage(i)})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, res...)
	}
	res, err := serial.Flush(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, res...)

	var c collector
	var posted atomic.Int64
	p, err := New(context.Background(), tinyStream(t), postSink{&testSink{add: c.deliver,
		post: func(r *engine.Result, meta int) (any, error) {
			posted.Add(1)
			return r.Seq * 10, nil
		},
	}}, Config[int]{Workers: 3, PostWorkers: 3, Policy: Block})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	for i := range n {
		in := Input[int]{Seq: uint64(i), Meta: i}
		if i == 4 {
			in.Decode = func() (image.Image, error) { return nil, errors.New("truncated PNG") }
		} else {
			img := testImage(i)
			// some frames decode on a worker, slower than others, to mix the order
			in.Decode = func() (image.Image, error) {
				time.Sleep(time.Duration((n-i)%3) * 2 * time.Millisecond)
				return img, nil
			}
		}
		if err := p.Submit(context.Background(), in); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(began)
	outs := c.get()
	if len(outs) != n {
		t.Fatalf("%d outputs for %d frames", len(outs), n)
	}
	var got []engine.Result
	for i, o := range outs {
		if o.Seq != uint64(i) || o.Meta != i {
			t.Fatalf("output %d is frame %d (meta %v): out of order", i, o.Seq, o.Meta)
		}
		if i == 4 {
			if o.Err == nil || o.Stage != "decode" {
				t.Fatalf("broken frame: err %v, stage %q", o.Err, o.Stage)
			}
			continue
		}
		if o.Err != nil || o.Result == nil {
			t.Fatalf("frame %d: %v", i, o.Err)
		}
		if o.Value != o.Result.Seq*10 {
			t.Fatalf("frame %d: post value %v", i, o.Value)
		}
		if o.Timing.Latency <= 0 || o.Timing.Model <= 0 {
			t.Fatalf("frame %d: timing %+v", i, o.Timing)
		}
		got = append(got, *o.Result)
	}
	if len(got) != len(want) || int(posted.Load()) != len(want) {
		t.Fatalf("%d results (%d posted), serial gave %d", len(got), posted.Load(), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Seq != w.Seq || g.Kind != w.Kind || g.PoseEnc != w.PoseEnc || !slices.Equal(g.Depth, w.Depth) || !slices.Equal(g.RGB, w.RGB) {
			t.Fatalf("result %d (frame %d) differs from the serial run", i, g.Seq)
		}
	}
	s := p.Stats()
	if s.Submitted != n || s.Delivered != n-1 || s.Failed != 1 || s.Waiting != 0 {
		t.Fatalf("stats %+v", s)
	}
	// the model's thread accounts for its time: the engine's calls, and
	// waits that never exceed the pipeline's life
	var model time.Duration
	for _, o := range outs {
		if o.Result != nil {
			model = max(model, o.Timing.Model)
		}
	}
	if s.ModelBusy < model || s.ModelBusy+s.ModelInput+s.ModelOutput > elapsed {
		t.Fatalf("model thread busy %v (a call took %v), waiting %v for input and %v for output, in %v", s.ModelBusy, model, s.ModelInput, s.ModelOutput, elapsed)
	}
	if err := p.Submit(context.Background(), Input[int]{Image: testImage(0)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Submit after Close: %v", err)
	}
}

// inFlightBound is the most frames a pipeline holds between Submit and
// Deliver: the queue, the dispatcher's hand, the model's line, the frame in
// the model, the results waiting behind it, the post workers' line and the
// one being delivered, plus the frames a phase 1 buffers.
func inFlightBound(c Config[int], buffered int) int {
	c = c.withDefaults()
	return c.Queue + 1 + (c.Workers + c.Ahead) + 1 + c.Behind + c.PostWorkers + 1 + buffered
}

// A consumer that stops holds everything back: Submit blocks (Block) once a
// bounded number of frames is inside, and every frame arrives once the
// consumer goes on. Decoded images alive at once stay within that bound.
func TestBackPressureBoundsMemory(t *testing.T) {
	gate := make(chan struct{})
	var c collector
	cfg := Config[int]{Workers: 2, PostWorkers: 1, Queue: 2, Ahead: 1, Behind: 2, Policy: Block}
	sink := &testSink{add: func(o Output[int]) {
		<-gate
		c.deliver(o)
	}}
	p, err := New(context.Background(), tinyStream(t), sink, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var decoded, maxLive atomic.Int64
	live := func() int64 { return decoded.Load() - int64(len(c.get())) }
	accepted := 0
	for i := range 60 {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		img := testImage(i)
		err := p.Submit(ctx, Input[int]{Seq: uint64(i), Decode: func() (image.Image, error) {
			decoded.Add(1)
			if l := live(); l > maxLive.Load() {
				maxLive.Store(l)
			}
			return img, nil
		}})
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		accepted++
	}
	bound := inFlightBound(cfg, 3)
	if accepted >= 60 || accepted > bound {
		t.Fatalf("%d frames accepted while the consumer was stopped; the bound is %d", accepted, bound)
	}
	if m := maxLive.Load(); m > int64(bound) {
		t.Fatalf("%d decoded frames alive at once; the bound is %d", m, bound)
	}
	close(gate)
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	outs := c.get()
	if len(outs) != accepted {
		t.Fatalf("%d outputs for %d accepted frames", len(outs), accepted)
	}
	for i, o := range outs {
		if o.Seq != uint64(i) || o.Err != nil {
			t.Fatalf("output %d: frame %d, %v", i, o.Seq, o.Err)
		}
	}
}

// DropOldest never blocks the producer: with the consumer stopped, the
// oldest waiting frames are dropped and counted, and what comes out is in
// order and adds up.
func TestDropOldest(t *testing.T) {
	gate := make(chan struct{})
	var c collector
	cfg := Config[int]{Workers: 1, PostWorkers: 1, Queue: 2, Ahead: 1, Behind: 2, Policy: DropOldest}
	sink := &testSink{add: func(o Output[int]) {
		<-gate
		c.deliver(o)
	}}
	p, err := New(context.Background(), tinyStream(t), sink, cfg)
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		start := time.Now()
		if err := p.Submit(ctx, Input[int]{Seq: uint64(i), Image: testImage(i), Meta: i}); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		cancel()
		if d := time.Since(start); d > time.Second {
			t.Fatalf("Submit waited %v with DropOldest", d)
		}
		time.Sleep(2 * time.Millisecond)
	}
	close(gate)
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := p.Stats()
	outs := c.get()
	var droppedSeqs []uint64
	for _, o := range c.skipped {
		if errors.Is(o.Err, ErrDropped) {
			droppedSeqs = append(droppedSeqs, o.Seq)
		}
	}
	if s.Dropped == 0 || int(s.Dropped) != len(droppedSeqs) {
		t.Fatalf("dropped %d (told of %d) of %d frames with the consumer stopped", s.Dropped, len(droppedSeqs), n)
	}
	if int64(len(outs))+s.Dropped+s.NoResult != n {
		t.Fatalf("%d outputs + %d dropped + %d without result != %d frames", len(outs), s.Dropped, s.NoResult, n)
	}
	if outs[len(outs)-1].Seq != n-1 {
		t.Fatalf("the newest frame %d was not processed (last output %d)", n-1, outs[len(outs)-1].Seq)
	}
	for i := 1; i < len(outs); i++ {
		if outs[i].Seq <= outs[i-1].Seq {
			t.Fatalf("outputs out of order: %d after %d", outs[i].Seq, outs[i-1].Seq)
		}
	}
	for _, d := range droppedSeqs {
		for _, o := range outs {
			if o.Seq == d {
				t.Fatalf("frame %d both dropped and delivered", d)
			}
		}
	}
	checkEveryFrameOnce(t, c.all, n)
}

// checkEveryFrameOnce checks that frames 0..n-1 (metadata i for frame i)
// each came out once, in order, with their metadata, whatever became of
// them.
func checkEveryFrameOnce(t *testing.T, all []Output[int], n int) {
	t.Helper()
	if len(all) != n {
		t.Fatalf("%d outputs for %d frames", len(all), n)
	}
	for i, o := range all {
		if o.Seq != uint64(i) || o.Meta != i {
			t.Fatalf("output %d is frame %d with metadata %d (stage %q): want frame %d with %d", i, o.Seq, o.Meta, o.Stage, i, i)
		}
	}
}

// Do runs on the model's thread after everything before it was delivered,
// and frames after it wait for it.
func TestDoIsABarrier(t *testing.T) {
	var c collector
	p, err := New(context.Background(), tinyStream(t), &testSink{add: c.deliver}, Config[int]{Policy: Block})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := p.Submit(context.Background(), Input[int]{Seq: uint64(i), Image: testImage(i), Meta: i}); err != nil {
			t.Fatal(err)
		}
	}
	var seen int
	var frames int
	if err := p.Do(context.Background(), func(cut Cut[int]) error {
		s := cut.Stream
		seen = len(c.get())
		frames = s.Stats().FrameCount
		return s.Reset()
	}); err != nil {
		t.Fatal(err)
	}
	if seen != 5 || frames != 5 {
		t.Fatalf("Do saw %d delivered outputs and %d cached frames; want 5 and 5", seen, frames)
	}
	wantErr := errors.New("checkpoint failed")
	if err := p.Do(context.Background(), func(Cut[int]) error { return wantErr }); !errors.Is(err, wantErr) {
		t.Fatalf("Do returned %v", err)
	}
	// after the reset, a new map: phase 1 again on the next three frames
	for i := 5; i < 8; i++ {
		if err := p.Submit(context.Background(), Input[int]{Seq: uint64(i), Image: testImage(i), Meta: i}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	outs := c.get()
	if len(outs) != 8 {
		t.Fatalf("%d outputs", len(outs))
	}
	for _, o := range outs[5:] {
		if o.Result == nil || o.Result.Kind != engine.Scale {
			t.Fatalf("frame %d after the reset: %+v, want a scale frame", o.Seq, o.Err)
		}
	}
}

// Cancelling the pipeline's context stops it without flushing, and Close
// returns.
func TestCancelStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	block := make(chan struct{})
	p, err := New(ctx, tinyStream(t), &testSink{add: func(Output[int]) { <-block }}, Config[int]{Policy: Block})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := p.Submit(context.Background(), Input[int]{Seq: uint64(i), Image: testImage(i), Meta: i}); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	close(block)
	done := make(chan error, 1)
	go func() { done <- p.Close(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Close after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return after the context was cancelled")
	}
}

// Early sees every result in order before its Post has finished (a pose
// leaves before the frame's clouds), and Deliver gets its value.
func TestEarlyRunsBeforePostInOrder(t *testing.T) {
	const n = 7
	var (
		mu    sync.Mutex
		early []uint64
	)
	// each Post waits until Early saw its frame: a pipeline that ran Early
	// after Post would never finish
	seen := make([]chan struct{}, n)
	for i := range seen {
		seen[i] = make(chan struct{})
	}
	var c collector
	p, err := New(context.Background(), tinyStream(t), earlySink{postSink{&testSink{add: c.deliver,
		early: func(o Output[int]) any {
			if o.Err != nil || o.Result == nil || o.Value != nil {
				t.Errorf("Early got frame %d with err %v, result %v, post value %v", o.Seq, o.Err, o.Result != nil, o.Value)
			}
			mu.Lock()
			early = append(early, o.Seq)
			mu.Unlock()
			close(seen[o.Seq])
			return o.Seq + 100
		},
		post: func(r *engine.Result, _ int) (any, error) {
			select {
			case <-seen[r.Seq]:
			case <-time.After(10 * time.Second):
				return nil, errors.New("Early never ran before this Post finished")
			}
			return r.Seq, nil
		},
	}}}, Config[int]{Workers: 2, PostWorkers: 2, Policy: Block})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := p.Submit(context.Background(), Input[int]{Seq: uint64(i), Image: testImage(i), Meta: i}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	outs := c.get()
	if len(outs) != n {
		t.Fatalf("%d outputs, want %d", len(outs), n)
	}
	for i, o := range outs {
		if o.Err != nil || o.Seq != uint64(i) || o.Early != uint64(i)+100 || o.Value != uint64(i) {
			t.Errorf("output %d: seq %d err %v early %v post %v", i, o.Seq, o.Err, o.Early, o.Value)
		}
	}
	if !slices.Equal(early, []uint64{0, 1, 2, 3, 4, 5, 6}) {
		t.Errorf("Early saw frames %v, want 0..6 in order", early)
	}
}

// gatedStream holds every Push until its gate opens.
type gatedStream struct {
	engine.Stream
	gate chan struct{}
}

func (g gatedStream) Push(ctx context.Context, f engine.Frame) ([]engine.Result, error) {
	<-g.gate
	return g.Stream.Push(ctx, f)
}

// With DropOldest a backlog stays where it can be dropped: while the model is
// held, only Ahead frames leave the queue, whatever the number of workers,
// so that the newest frames are the ones that run once it goes on.
func TestDropOldestBacklogStaysDroppable(t *testing.T) {
	gate := make(chan struct{})
	var c collector
	cfg := Config[int]{Workers: 4, PostWorkers: 1, Queue: 2, Ahead: 1, Policy: DropOldest}
	p, err := New(context.Background(), gatedStream{tinyStream(t), gate}, &testSink{add: c.deliver}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		if err := p.Submit(context.Background(), Input[int]{Seq: uint64(i), Image: testImage(i), Meta: i}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Millisecond) // workers take what they may
	}
	close(gate)
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	outs := c.get()
	var seqs []uint64
	for _, o := range outs {
		seqs = append(seqs, o.Seq)
	}
	// frame 0 in the model, Ahead more past the queue, the Queue newest
	if max := 1 + cfg.Ahead + cfg.Queue; len(seqs) > max {
		t.Fatalf("%d frames ran (%v) after the model was held: more than the %d that may be past the queue or in it", len(seqs), seqs, max)
	}
	if len(seqs) < 2 || seqs[len(seqs)-1] != n-1 || seqs[len(seqs)-2] != n-2 {
		t.Fatalf("frames run %v: the newest two (%d, %d) must be among them", seqs, n-2, n-1)
	}
	if s := p.Stats(); int(s.Dropped)+len(seqs)+int(s.NoResult) != n {
		t.Fatalf("%d dropped + %d run + %d without result != %d", s.Dropped, len(seqs), s.NoResult, n)
	}
	checkEveryFrameOnce(t, c.all, n)
}
