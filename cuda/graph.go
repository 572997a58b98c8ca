//go:build cuda

package cuda

/*
#include <stdlib.h>
#include <string.h>
#include <cuda.h>

static int lbm_stream_create(CUstream *s) { return (int)cuStreamCreate(s, CU_STREAM_NON_BLOCKING); }
static void lbm_stream_destroy(CUstream s) { cuStreamDestroy(s); }
static int lbm_capture_begin(CUstream s) { return (int)cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL); }
static int lbm_capture_end(CUstream s, CUgraph *g) { return (int)cuStreamEndCapture(s, g); }
static int lbm_graph_instantiate(CUgraphExec *e, CUgraph g) { return (int)cuGraphInstantiateWithFlags(e, g, 0); }
static int lbm_graph_launch(CUgraphExec e, CUstream s) { return (int)cuGraphLaunch(e, s); }
static void lbm_graph_destroy(CUgraph g) { cuGraphDestroy(g); }
static void lbm_graph_exec_destroy(CUgraphExec e) { cuGraphExecDestroy(e); }
static int lbm_copy_async(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { return (int)cuMemcpyDtoDAsync(d, s, n, st); }
static int lbm_zero_async(CUdeviceptr d, size_t n, CUstream st) { return (int)cuMemsetD32Async(d, 0, n, st); }
*/
import "C"

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math/bits"
	"slices"
	"strings"
	"sync/atomic"
	"unsafe"

	"gorgonia.org/cu"
)

// A batch collects the kernel launches, GEMMs, device copies and memsets
// that the ops submit between two points where the host meets the device
// (a copy to or from host memory, a synchronisation, a free, an op whose
// arguments change every frame) and submits them together at the next such
// point (flush). A frame repeats the same segments with the same buffers
// (the pool hands back the same addresses), so a segment seen before runs
// as a CUDA graph captured the second time it came: one launch instead of
// dozens, and the device schedules its kernels back to back. A segment is
// identified by all it submits, pointers and scalars included, so a graph
// runs only where direct launches would have done exactly the same.
//
// Owner thread only, like the launcher it belongs to.
type batch struct {
	l   *launcher
	lt  *cublasLt
	log *slog.Logger
	// enabled: Config.Graphs and not profiling; cleared after repeated
	// capture failures.
	enabled bool
	// hold > 0 submits directly (ops whose arguments change every frame).
	hold int
	// capture is the stream graphs are recorded on (the default stream
	// cannot be captured; graphs are launched on it).
	capture C.CUstream

	items []queued
	// arena holds the argument slots of the queued kernels (C memory: the
	// driver reads them through pointers at capture or launch), and the
	// copies of their tensor maps, 64-byte aligned like the maps themselves.
	arena    *C.uint64_t
	arenaCap int
	arenaLen int
	key      []byte
	// offs[i] is where item i's part of key starts.
	offs []int

	seed   maphash.Seed
	seen   map[uint64]bool
	graphs map[uint64]*segmentGraph
	stats  GraphStats
	// captured is GraphStats.Captures (stats leaves it at zero), atomic
	// for readers off the owner thread (bench reads it after every frame).
	captured atomic.Int64
	warned   bool
	// last[shape] is the key of the last segment of that shape (its ops
	// without their arguments) that had no graph, and changed counts, by
	// op and word of the key, where a segment first differed from the
	// last of its shape: which arguments keep segments from repeating.
	last    map[uint64][]byte
	changed map[string]int
	// limit bounds the segment being collected: firstSegment after the
	// host waited for the device (restart), doubling with each segment up
	// to maxSegment, so that an idle device gets the first ops of a frame
	// while the host queues the rest. The waits come at the same points of
	// every frame, so the segments still repeat.
	limit int
}

type segmentGraph struct {
	exec C.CUgraphExec
	key  []byte
}

type queuedKind uint8

const (
	qKernel queuedKind = iota + 1
	qGEMM
	qCopy
	qZero
)

// queued is one submission waiting in a batch.
type queued struct {
	kind         queuedKind
	name         string
	fn           C.CUfunction
	grid, block  [3]int
	shared       int
	pdl          bool
	arg0, nargs  int
	maps         uint32         // the arguments that are tensor maps (batch.kernel)
	plan         unsafe.Pointer // *C.lbm_plan (cublaslt.go)
	gk           gemmKey
	a, b, c, d   cu.DevicePtr
	bias         cu.DevicePtr
	ws           cu.DevicePtr // a GEMM's cuBLASLt workspace (bytes: its size)
	dst, src     cu.DevicePtr
	bytes, words int64
}

const (
	// maxSegment bounds a segment, so that the device starts on the first
	// part of a long stretch of ops while the host queues the rest.
	maxSegment = 64
	// firstSegment bounds the first segment after a wait for the device.
	firstSegment = 4
	// minGraph: shorter segments are submitted directly (a graph launch
	// costs about what two kernel launches do).
	minGraph = 3
	// Bounds on the remembered segments and graphs; past them they are
	// forgotten and recorded anew.
	maxSeen   = 1 << 14
	maxGraphs = 2048
	// maxShapes bounds the keys kept for the changed-argument counts.
	maxShapes = 1024
)

func newBatch(l *launcher, log *slog.Logger, enabled bool) (*batch, error) {
	b := &batch{l: l, log: log, seed: maphash.MakeSeed(), seen: map[uint64]bool{}, graphs: map[uint64]*segmentGraph{},
		last: map[uint64][]byte{}, changed: map[string]int{}, limit: maxSegment}
	if enabled {
		if err := driverError(C.lbm_stream_create(&b.capture)); err != nil {
			return nil, fmt.Errorf("creating the CUDA graph capture stream: %w", err)
		}
		b.enabled = true
	}
	l.q = b
	return b, nil
}

// stream is where direct submissions and graph launches go (launcher.stream).
func (b *batch) stream() C.CUstream {
	if b == nil {
		return nil
	}
	return b.l.stream
}

// collecting says whether submissions are queued now.
func (b *batch) collecting() bool { return b != nil && b.enabled && b.hold == 0 }

// direct runs fn with every submission going straight to the device, after
// what is queued: for ops whose arguments change from frame to frame (the
// KV cache's writes and paged attention), which would make their segment
// new every time.
func (b *batch) direct(fn func() error) error {
	if b == nil {
		return fn()
	}
	if err := b.flush(); err != nil {
		return err
	}
	b.hold++
	defer func() { b.hold-- }()
	return fn()
}

func (b *batch) slots(n int) (int, []uint64) {
	if b.arenaLen+n > b.arenaCap {
		// A multiple of 8 slots from a 64-byte boundary, so that slot
		// offsets that are multiples of 8 stay 64-byte aligned (tensor maps).
		c := (max(2*b.arenaCap, b.arenaLen+n, 1024) + 7) &^ 7
		p := (*C.uint64_t)(C.aligned_alloc(64, C.size_t(c*8)))
		if p == nil {
			panic("cuda: out of host memory for kernel arguments")
		}
		if b.arena != nil {
			C.memcpy(unsafe.Pointer(p), unsafe.Pointer(b.arena), C.size_t(b.arenaLen*8))
			C.free(unsafe.Pointer(b.arena))
		}
		b.arena, b.arenaCap = p, c
	}
	at := b.arenaLen
	b.arenaLen += n
	all := unsafe.Slice((*uint64)(unsafe.Pointer(b.arena)), b.arenaCap)
	return at, all[at : at+n]
}

// mark starts an item's part of the key.
func (b *batch) mark() { b.offs = append(b.offs, len(b.key)) }

func (b *batch) add(q queued, key ...uint64) error {
	b.key = binary.LittleEndian.AppendUint64(b.key, uint64(q.kind))
	for _, k := range key {
		b.key = binary.LittleEndian.AppendUint64(b.key, k)
	}
	b.items = append(b.items, q)
	if len(b.items) >= b.limit {
		b.limit = min(2*b.limit, maxSegment)
		return b.flush()
	}
	return nil
}

// restart makes the next segments short again: the host has just waited
// for the device, which is idle until the next submission.
func (b *batch) restart() {
	if b != nil {
		b.limit = firstSegment
	}
}

// kernel queues a launch (arguments encoded as launcher.launch does). A
// tensor map argument is copied into the arena, 64-byte aligned after the
// launch's slots, and its slot holds the copy's offset (queued.maps marks
// those slots): the map's bytes are part of the segment's key, and the
// caller may reuse its map once this returns.
func (b *batch) kernel(f kernelFunc, name string, grid, block [3]int, shared int, pdl bool, args []any) error {
	var maps uint32
	for i, a := range args {
		if _, ok := a.(tensorMap); ok {
			maps |= 1 << i
		}
	}
	nmaps := bits.OnesCount32(maps)
	extra := 0
	if nmaps > 0 {
		extra = 7 + nmaps*tensorMapBytes/8
	}
	at, s := b.slots(len(args) + extra)
	if err := encodeArgs(name, s[:len(args)], args); err != nil {
		b.arenaLen = at
		return err
	}
	if nmaps > 0 {
		off := (at + len(args) + 7) &^ 7
		all := unsafe.Slice((*uint64)(unsafe.Pointer(b.arena)), b.arenaCap)
		clear(all[at+len(args) : off]) // the padding is part of the key
		for i, a := range args {
			if t, ok := a.(tensorMap); ok {
				copy(all[off:off+tensorMapBytes/8], unsafe.Slice((*uint64)(t.p), tensorMapBytes/8))
				s[i] = uint64(off)
				off += tensorMapBytes / 8
			}
		}
		s = s[:off-at]
		b.stats.MapLaunches++
	} else {
		s = s[:len(args)]
	}
	b.mark()
	b.key = binary.LittleEndian.AppendUint64(b.key, uint64(uintptr(unsafe.Pointer(f.fn))))
	for i := range 3 {
		b.key = binary.LittleEndian.AppendUint64(b.key, uint64(grid[i])<<32|uint64(block[i]))
	}
	p := uint64(0)
	if pdl {
		p = 1
	}
	b.key = binary.LittleEndian.AppendUint64(b.key, uint64(shared)<<8|p)
	for _, v := range s {
		b.key = binary.LittleEndian.AppendUint64(b.key, v)
	}
	return b.add(queued{kind: qKernel, name: name, fn: f.fn, grid: grid, block: block, shared: shared, pdl: pdl, arg0: at, nargs: len(args), maps: maps},
		uint64(len(args)))
}

// copyDtoD copies bytes between device buffers, queued when collecting.
func (b *batch) copyDtoD(dst, src cu.DevicePtr, n int64) error {
	if !b.collecting() {
		if err := b.flush(); err != nil {
			return err
		}
		return driverError(C.lbm_copy_async(C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n), b.stream()))
	}
	b.mark()
	return b.add(queued{kind: qCopy, name: "copy", dst: dst, src: src, bytes: n}, uint64(dst), uint64(src), uint64(n))
}

// zero sets n 32-bit words at dst to 0, queued when collecting.
func (b *batch) zero(dst cu.DevicePtr, n int64) error {
	if !b.collecting() {
		if err := b.flush(); err != nil {
			return err
		}
		return driverError(C.lbm_zero_async(C.CUdeviceptr(dst), C.size_t(n), b.stream()))
	}
	b.mark()
	return b.add(queued{kind: qZero, name: "zero", dst: dst, words: n}, uint64(dst), uint64(n))
}

// flush submits what is queued: as a graph when this segment has a graph,
// by recording one when it was seen before, and otherwise directly.
func (b *batch) flush() error {
	if b == nil || len(b.items) == 0 {
		return nil
	}
	defer b.reset()
	n := int64(len(b.items))
	if len(b.items) < minGraph {
		b.stats.Direct += n
		return b.issue(b.l.stream)
	}
	h := maphash.Bytes(b.seed, b.key)
	if sg := b.graphs[h]; sg != nil && bytes.Equal(sg.key, b.key) {
		return b.launch(sg)
	}
	if !b.seen[h] {
		if len(b.seen) >= maxSeen {
			clear(b.seen)
		}
		b.seen[h] = true
		b.stats.Direct += n
		b.noteChange()
		return b.issue(b.l.stream)
	}
	exec, err := b.record()
	if err != nil {
		b.stats.Failures++
		if !b.warned {
			b.warned = true
			b.log.Warn("cuda: recording a CUDA graph failed; its operations run one by one", "operations", n, "ops", b.names(), "err", err)
		}
		if b.stats.Failures >= 3 && b.captured.Load() == 0 {
			b.enabled = false
			b.log.Warn("cuda: CUDA graphs are off for this backend: no capture succeeded")
		}
		b.stats.Direct += n
		return b.issue(b.l.stream)
	}
	if len(b.graphs) >= maxGraphs {
		if err := b.forget(); err != nil {
			C.lbm_graph_exec_destroy(exec)
			return err
		}
	}
	sg := &segmentGraph{exec: exec, key: bytes.Clone(b.key)}
	b.graphs[h] = sg
	delete(b.seen, h)
	b.captured.Add(1)
	return b.launch(sg)
}

// launch runs the queued segment as its graph.
func (b *batch) launch(sg *segmentGraph) error {
	b.stats.Replayed += int64(len(b.items))
	b.stats.Launches++
	if err := driverError(C.lbm_graph_launch(sg.exec, b.l.stream)); err != nil {
		return fmt.Errorf("launching a CUDA graph of %d operations (%s): %w", len(b.items), b.names(), err)
	}
	return nil
}

// record captures the queued submissions into a graph and instantiates it.
// Nothing runs during a capture.
func (b *batch) record() (C.CUgraphExec, error) {
	if err := driverError(C.lbm_capture_begin(b.capture)); err != nil {
		return nil, fmt.Errorf("beginning a capture: %w", err)
	}
	ierr := b.issue(b.capture)
	var gr C.CUgraph
	if err := driverError(C.lbm_capture_end(b.capture, &gr)); err != nil || ierr != nil {
		if gr != nil {
			C.lbm_graph_destroy(gr)
		}
		return nil, errors.Join(ierr, err)
	}
	defer C.lbm_graph_destroy(gr)
	var exec C.CUgraphExec
	if err := driverError(C.lbm_graph_instantiate(&exec, gr)); err != nil {
		return nil, fmt.Errorf("instantiating a graph: %w", err)
	}
	return exec, nil
}

// issue submits the queued work on stream (nil: the default stream), or
// records it when stream is the capture stream.
func (b *batch) issue(stream C.CUstream) error {
	all := unsafe.Slice((*uint64)(unsafe.Pointer(b.arena)), b.arenaCap)
	for i := range b.items {
		q := &b.items[i]
		var err error
		switch q.kind {
		case qKernel:
			err = b.l.runSlots(q.fn, q.name, q.grid, q.block, q.shared, q.pdl, all[q.arg0:q.arg0+q.nargs], q.maps, all, stream)
		case qGEMM:
			err = b.lt.runQueued(q, stream)
		case qCopy:
			err = driverError(C.lbm_copy_async(C.CUdeviceptr(q.dst), C.CUdeviceptr(q.src), C.size_t(q.bytes), stream))
		case qZero:
			err = driverError(C.lbm_zero_async(C.CUdeviceptr(q.dst), C.size_t(q.words), stream))
		}
		if err != nil {
			return fmt.Errorf("%s (operation %d of %d queued): %w", q.name, i+1, len(b.items), err)
		}
	}
	return nil
}

// names lists the kernels of the queued segment, for messages.
func (b *batch) names() string {
	const most = 6
	var s []byte
	for i, q := range b.items {
		if i == most {
			s = fmt.Appendf(s, ", … (%d more)", len(b.items)-most)
			break
		}
		if i > 0 {
			s = append(s, ", "...)
		}
		s = append(s, q.name...)
	}
	return string(s)
}

// noteChange compares a segment without a graph with the last one of its
// shape and counts the op and key word where they first differ.
func (b *batch) noteChange() {
	var sh maphash.Hash
	sh.SetSeed(b.seed)
	for i := range b.items {
		sh.WriteString(b.items[i].name)
	}
	_ = binary.Write(&sh, binary.LittleEndian, int64(len(b.key)))
	shape := sh.Sum64()
	prev, ok := b.last[shape]
	if ok && len(prev) == len(b.key) {
		for at := range b.key {
			if prev[at] == b.key[at] {
				continue
			}
			i := 0
			for i+1 < len(b.offs) && b.offs[i+1] <= at {
				i++
			}
			b.changed[fmt.Sprintf("%s word %d", b.items[i].name, (at-b.offs[i])/8)]++
			break
		}
	}
	if !ok && len(b.last) >= maxShapes {
		clear(b.last)
	}
	b.last[shape] = append(prev[:0], b.key...)
}

// mostChanged lists the ops and key words that most often kept segments
// from repeating, for the log.
func (b *batch) mostChanged() string {
	type kv struct {
		k string
		n int
	}
	var all []kv
	for k, n := range b.changed {
		all = append(all, kv{k, n})
	}
	slices.SortFunc(all, func(x, y kv) int { return y.n - x.n })
	var s []string
	for _, e := range all[:min(len(all), 8)] {
		s = append(s, fmt.Sprintf("%s ×%d", e.k, e.n))
	}
	return strings.Join(s, "; ")
}

func (b *batch) reset() {
	b.offs = b.offs[:0]
	b.items = b.items[:0]
	b.arenaLen = 0
	b.key = b.key[:0]
}

// forget destroys every graph, after the device has finished with them.
func (b *batch) forget() error {
	if len(b.graphs) > 0 {
		if err := cu.Synchronize(); err != nil {
			return err
		}
	}
	for _, sg := range b.graphs {
		C.lbm_graph_exec_destroy(sg.exec)
	}
	clear(b.graphs)
	clear(b.seen)
	return nil
}

// close flushes, waits and frees the graphs, the stream and the arena.
func (b *batch) close() error {
	if b == nil {
		return nil
	}
	err := b.flush()
	if ferr := b.forget(); err == nil {
		err = ferr
	}
	if b.capture != nil {
		C.lbm_stream_destroy(b.capture)
		b.capture = nil
	}
	C.free(unsafe.Pointer(b.arena))
	b.arena, b.arenaCap = nil, 0
	b.enabled = false
	return err
}

// statsNow is the counters with the graphs held now.
func (b *batch) statsNow() GraphStats {
	s := b.stats
	s.Graphs = len(b.graphs)
	s.Captures = b.captured.Load()
	return s
}
