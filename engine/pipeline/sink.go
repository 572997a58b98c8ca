package pipeline

import (
	"context"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
)

// What comes out of a pipeline: an Output per frame submitted, in input
// order, with the caller's metadata, into one Sink.

// Output is what the sink's Add gets for each frame, in input order: a
// result, or the error that stopped the frame.
type Output[M any] struct {
	Seq    uint64
	Stamp  time.Time
	Meta   M
	Result *engine.Result // nil when Err is set
	Value  any            // what the sink's Post returned
	Early  any            // what the sink's Early returned
	Err    error
	// Stage names where Err came from: "decode", "prepare", "model",
	// "post", "drop" (ErrDropped) or "none" (ErrNoResult).
	Stage  string
	Timing Timing
}

// Skipped says the frame never reached the model's result: it was dropped
// or the stream consumed it without a result. Sinks that count failures
// leave these out (the pipeline's Stats count them).
func (o *Output[M]) Skipped() bool { return o.Stage == "drop" || o.Stage == "none" }

// Sink takes a pipeline's outputs. The pipeline calls Add and Checkpoint;
// Close is its owner's, after Pipeline.Close, as the stream is: the end of
// a run may need what only the owner knows (why it ended).
type Sink[M any] interface {
	// Add takes every frame's output in input order, one at a time. It
	// must not call Submit or Do (they may wait for Add).
	Add(Output[M])
	// Checkpoint runs on the model's thread (Pipeline.Checkpoint) once
	// every frame submitted before it has been added, so that the sink and
	// the stream stand at the same frame: saved outputs, a session.
	Checkpoint(ctx context.Context, at Cut[M]) error
	// Close ends the sink: its last writes, its files closed.
	Close(ctx context.Context) error
}

// Poster is a Sink with work of its own per result that need not wait for
// the frames before it (images, unprojection, messages): the pipeline runs
// Post on its workers, off the model's thread and in any order, and hands
// its value to Add as Output.Value. An error fails the frame (Stage
// "post").
type Poster[M any] interface {
	Post(r *engine.Result, meta M) (any, error)
}

// Earlier is a Sink with something that must not wait for Post (a pose):
// the pipeline calls Early for every result in input order as soon as the
// model gave it, on a goroutine of its own, and hands its value to Add as
// Output.Early. It must not call Submit or Do.
type Earlier[M any] interface {
	Early(Output[M]) any
}

// Cut is where a Do or a Checkpoint stands: the stream, and the frames it
// has taken without giving their results yet (a phase 1 being gathered, a
// window's held results), oldest first, with their metadata.
type Cut[M any] struct {
	Stream engine.Stream
	Held   []Held[M]
	// Next is one past the Seq of the last frame submitted before the cut
	// (0 when none was): where a resumed session's numbering goes on.
	Next uint64
}

// Held is a frame the stream holds without a result.
type Held[M any] struct {
	Seq   uint64
	Stamp time.Time
	Meta  M
}
