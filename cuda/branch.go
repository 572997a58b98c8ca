//go:build cuda

package cuda

/*
#include <cuda.h>

static int lbm_side_stream(CUstream *s) {
	int least = 0, greatest = 0;
	cuCtxGetStreamPriorityRange(&least, &greatest);
	return (int)cuStreamCreateWithPriority(s, CU_STREAM_NON_BLOCKING, greatest);
}
static int lbm_branch_event(CUevent *e) { return (int)cuEventCreate(e, CU_EVENT_DISABLE_TIMING); }
static int lbm_branch_record(CUevent e, CUstream s) { return (int)cuEventRecord(e, s); }
static int lbm_branch_wait(CUstream s, CUevent e) { return (int)cuStreamWaitEvent(s, e, 0); }
static int lbm_branch_sync(CUstream s) { return (int)cuStreamSynchronize(s); }
static void lbm_branch_stream_free(CUstream s) { cuStreamDestroy(s); }
static void lbm_branch_event_free(CUevent e) { cuEventDestroy(e); }
*/
import "C"

import "fmt"

// branch is the state of backend.Brancher: a branch's operations go to a
// second stream, created non-blocking (the default stream is the legacy
// one, which would otherwise serialise with it) and at the highest
// priority, so that the branch's chain of small kernels gets the
// multiprocessors as the other stream's blocks drain. Owner thread only.
//
// Memory: the pool recycles a buffer as soon as it is freed, in the
// default stream's order. While a branch is open or not yet merged, a
// buffer freed on either side could still be read by the other stream's
// queued kernels, so the pool holds every such buffer until the merge,
// except those the default stream allocated after the branch ended (the
// branch cannot know them); while the branch is open, only it runs, so it
// may take back what it freed itself (pool.reuseHeld).
type branch struct {
	side       C.CUstream
	fork, join C.CUevent
	// open: the branch's function is running, its submissions going to
	// side.
	open bool
	// pending: the branch's work is recorded on join, and the default
	// stream has not yet waited for it.
	pending bool
	// gen is the pool's generation of the open branch's allocations.
	gen int64
	// branches counts the branches run on the side stream; serial those
	// that a copy to or from the host, or a form made of an older buffer
	// (derive), ended on the host's side.
	branches, serial int64
}

// Branch runs fn with its submissions on the side stream
// (backend.Brancher), after everything queued so far. Without
// Config.SideStream, while profiling (its events time the default stream)
// or without batching, fn runs in line.
func (g *gpu) Branch(fn func()) {
	forked := false
	g.run("Branch", func() error {
		var err error
		forked, err = g.forkBranch()
		return err
	})
	if !forked {
		fn()
		return
	}
	defer func() {
		if err := g.own.do(g.endBranch); err != nil && err != errClosed {
			g.fail(fmt.Errorf("cuda: ending a branch: %w", err))
		}
	}()
	fn()
}

// Merge has the default stream wait for the last branch's work
// (backend.Brancher).
func (g *gpu) Merge() { g.run("Merge", g.merge) }

func (g *gpu) forkBranch() (bool, error) {
	if !g.cfg.SideStream || g.prof != nil || g.batch == nil {
		return false, nil
	}
	br := &g.br
	if br.open {
		// a branch inside a branch runs in line on the side stream
		return false, nil
	}
	if err := g.merge(); err != nil {
		return false, err
	}
	if br.side == nil {
		if err := driverError(C.lbm_side_stream(&br.side)); err != nil {
			return false, fmt.Errorf("creating the side stream: %w", err)
		}
		if err := driverError(C.lbm_branch_event(&br.fork)); err != nil {
			return false, fmt.Errorf("creating the branch events: %w", err)
		}
		if err := driverError(C.lbm_branch_event(&br.join)); err != nil {
			return false, fmt.Errorf("creating the branch events: %w", err)
		}
	}
	if err := g.batch.flush(); err != nil {
		return false, err
	}
	if err := driverError(C.lbm_branch_record(br.fork, nil)); err != nil {
		return false, fmt.Errorf("recording the branch's start: %w", err)
	}
	if err := driverError(C.lbm_branch_wait(br.side, br.fork)); err != nil {
		return false, fmt.Errorf("starting the side stream: %w", err)
	}
	g.launcher.stream = br.side
	g.pool.hold(false)
	br.gen = g.pool.gen
	br.open = true
	br.branches++
	return true, nil
}

// endBranch records the branch's end on the side stream and sends what
// follows to the default stream again.
func (g *gpu) endBranch() error {
	br := &g.br
	if !br.open {
		return nil // it ended on the host's side (settle)
	}
	err := g.batch.flush()
	if err == nil {
		err = driverError(C.lbm_branch_record(br.join, br.side))
	}
	g.launcher.stream = nil
	br.open = false
	if err != nil {
		// the side stream's state is unknown: wait for all of it
		return g.serialise(err)
	}
	br.pending = true
	g.pool.hold(true)
	return nil
}

// merge has the default stream wait for the branch after submitting what
// the default stream queued beside it, and recycles the held buffers.
func (g *gpu) merge() error {
	br := &g.br
	if br.open {
		return g.settle()
	}
	if !br.pending {
		return nil
	}
	br.pending = false
	if err := g.batch.flush(); err != nil {
		return g.serialise(err)
	}
	if err := driverError(C.lbm_branch_wait(nil, br.join)); err != nil {
		return g.serialise(fmt.Errorf("merging the side stream: %w", err))
	}
	g.pool.unhold()
	return nil
}

// settle is flush's part: before the host meets the device, an open
// branch ends on the host's side (its rest runs on the default stream)
// and a pending one merges.
func (g *gpu) settle() error {
	br := &g.br
	if !br.open {
		return g.merge()
	}
	br.serial++
	err := g.batch.flush()
	g.launcher.stream = nil
	br.open = false
	return g.serialise(err)
}

// derive is called before an op adds a form of its values to buf (a
// weight's bf16 or tap-major copy, an activation's fp32 copy), which later
// readers use without another thought: made inside an open branch on a
// buffer from before it, the copy would be on the side stream while the
// default stream may read it before the merge, so the branch ends on the
// host's side first.
func (g *gpu) derive(buf *buffer) error {
	if !g.br.open || buf.gen >= g.br.gen {
		return nil
	}
	return g.settle()
}

// serialise waits for the side stream, so that nothing on it can still
// read a buffer, and recycles the held ones; err is returned first.
func (g *gpu) serialise(err error) error {
	br := &g.br
	br.pending = false
	if br.side != nil {
		if serr := driverError(C.lbm_branch_sync(br.side)); err == nil && serr != nil {
			err = fmt.Errorf("waiting for the side stream: %w", serr)
		}
	}
	g.pool.unhold()
	return err
}

// close destroys the stream and events; the device must be idle.
func (br *branch) close() {
	if br.side != nil {
		C.lbm_branch_stream_free(br.side)
		C.lbm_branch_event_free(br.fork)
		C.lbm_branch_event_free(br.join)
	}
	*br = branch{branches: br.branches, serial: br.serial}
}
