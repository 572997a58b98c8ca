//go:build ros2

package fastdds

/*
#cgo CXXFLAGS: -std=c++17
#cgo LDFLAGS: -lfastrtps -lfastcdr -lstdc++
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
	"unsafe"
)

const errLen = 256

func cErr(op string, buf []C.char) error {
	msg := C.GoString(&buf[0])
	if msg == "" {
		msg = "failed"
	}
	return fmt.Errorf("fastdds: %s: %s", op, msg)
}

func guidFrom(b *[16]C.uint8_t) GUID { return *(*GUID)(unsafe.Pointer(&b[0])) }

// Participant is a Fast DDS domain participant. Its methods are safe for
// concurrent use.
type Participant struct {
	p    *C.lbf_participant
	guid GUID

	mu      sync.Mutex
	readers map[*Reader]struct{}
	writers map[*Writer]struct{}
	closed  bool
}

// NewParticipant creates a participant with cfg (UDPv4 only).
func NewParticipant(cfg ParticipantConfig) (*Participant, error) {
	peers := make([]*C.char, len(cfg.Peers))
	for i, s := range cfg.Peers {
		peers[i] = C.CString(s)
		defer C.free(unsafe.Pointer(peers[i]))
	}
	var pp **C.char
	if len(peers) > 0 {
		// cgo forbids Go pointers to Go pointers; the C strings are C memory.
		pp = (**C.char)(C.malloc(C.size_t(len(peers)) * C.size_t(unsafe.Sizeof(peers[0]))))
		defer C.free(unsafe.Pointer(pp))
		copy(unsafe.Slice(pp, len(peers)), peers)
	}
	ud := C.CString(cfg.UserData)
	defer C.free(unsafe.Pointer(ud))
	local := C.int(0)
	if cfg.LocalhostOnly {
		local = 1
	}
	var prefix *C.uint8_t
	if len(cfg.GUIDPrefix) > 0 {
		if len(cfg.GUIDPrefix) != 12 {
			return nil, fmt.Errorf("fastdds: a GUID prefix has 12 bytes, not %d", len(cfg.GUIDPrefix))
		}
		prefix = (*C.uint8_t)(C.CBytes(cfg.GUIDPrefix))
		defer C.free(unsafe.Pointer(prefix))
	}
	var g [16]C.uint8_t
	buf := make([]C.char, errLen)
	p := C.lbf_participant_new(C.uint32_t(cfg.Domain), local, pp, C.size_t(len(peers)), ud, C.size_t(len(cfg.UserData)), prefix, &g[0], &buf[0], errLen)
	if p == nil {
		return nil, cErr(fmt.Sprintf("creating a participant on domain %d", cfg.Domain), buf)
	}
	return &Participant{p: p, guid: guidFrom(&g), readers: map[*Reader]struct{}{}, writers: map[*Writer]struct{}{}}, nil
}

// GUID is the participant's GUID.
func (p *Participant) GUID() GUID { return p.guid }

func withQoS(q QoS, f func(*C.lbf_qos)) {
	depth := max(q.Depth, 1)
	cq := C.lbf_qos{depth: C.int32_t(min(depth, math.MaxInt32))}
	if q.Reliable {
		cq.reliable = 1
	}
	if q.TransientLocal {
		cq.transient_local = 1
	}
	if q.UserData != "" {
		ud := C.CString(q.UserData)
		defer C.free(unsafe.Pointer(ud))
		cq.user_data = ud
		cq.user_data_len = C.size_t(len(q.UserData))
	}
	f(&cq)
}

// Writer writes raw CDR samples on one topic.
type Writer struct {
	p    *Participant
	w    *C.lbf_writer
	guid GUID

	mu     sync.Mutex // orders writes and waits before Close
	closed bool
}

// NewWriter creates a writer on topic with the raw-CDR type typeName.
func (p *Participant) NewWriter(topic, typeName string, q QoS) (*Writer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("fastdds: creating a writer on %s: participant closed", topic)
	}
	ct, cn := C.CString(topic), C.CString(typeName)
	defer C.free(unsafe.Pointer(ct))
	defer C.free(unsafe.Pointer(cn))
	var g [16]C.uint8_t
	buf := make([]C.char, errLen)
	var w *C.lbf_writer
	withQoS(q, func(cq *C.lbf_qos) { w = C.lbf_writer_new(p.p, ct, cn, cq, &g[0], &buf[0], errLen) })
	if w == nil {
		return nil, cErr("creating a writer on "+topic, buf)
	}
	wr := &Writer{p: p, w: w, guid: guidFrom(&g)}
	p.writers[wr] = struct{}{}
	return wr, nil
}

// GUID is the writer's GUID.
func (w *Writer) GUID() GUID { return w.guid }

var errClosed = errors.New("fastdds: writer closed")

// Write publishes one serialized sample; a non-zero related identity goes
// with it as PID_RELATED_SAMPLE_IDENTITY.
func (w *Writer) Write(b []byte, related Identity) error {
	if len(b) > math.MaxUint32 {
		return fmt.Errorf("fastdds: sample of %d bytes is too large", len(b))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errClosed
	}
	var id C.lbf_identity
	for i, x := range related.Writer {
		id.guid[i] = C.uint8_t(x)
	}
	id.seq = C.int64_t(related.Seq)
	cb := C.CBytes(b)
	defer C.free(cb)
	if C.lbf_write(w.w, cb, C.uint32_t(len(b)), &id) != 1 {
		return errors.New("fastdds: write failed")
	}
	return nil
}

// WaitReader waits up to timeout until the writer has matched the reader
// with GUID g.
func (w *Writer) WaitReader(g GUID, timeout time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	var cg [16]C.uint8_t
	for i, x := range g {
		cg[i] = C.uint8_t(x)
	}
	return C.lbf_writer_wait_reader(w.w, &cg[0], C.int64_t(timeout.Milliseconds())) == 1
}

// Matched is the number of readers the writer is matched with now.
func (w *Writer) Matched() (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, errClosed
	}
	n := C.lbf_writer_matched(w.w)
	if n < 0 {
		return 0, errors.New("fastdds: reading the publication matched status failed")
	}
	return int(n), nil
}

// Close deletes the writer.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	C.lbf_writer_delete(w.w)
	w.mu.Unlock()
	w.p.mu.Lock()
	delete(w.p.writers, w)
	w.p.mu.Unlock()
	return nil
}

// pollEvery bounds how long Close waits for a reader's loop to notice.
const pollEvery = 100 * time.Millisecond

// Reader receives raw CDR samples on one topic and hands each to its
// deliver function, from one goroutine of its own.
type Reader struct {
	p    *Participant
	r    *C.lbf_reader
	guid GUID
	stop chan struct{}
	done chan struct{}
	once sync.Once
	err  error
}

// NewReader creates a reader on topic and starts delivering its samples to
// deliver, one at a time.
func (p *Participant) NewReader(topic, typeName string, q QoS, deliver func(Sample)) (*Reader, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("fastdds: creating a reader on %s: participant closed", topic)
	}
	ct, cn := C.CString(topic), C.CString(typeName)
	defer C.free(unsafe.Pointer(ct))
	defer C.free(unsafe.Pointer(cn))
	var g [16]C.uint8_t
	buf := make([]C.char, errLen)
	var r *C.lbf_reader
	withQoS(q, func(cq *C.lbf_qos) { r = C.lbf_reader_new(p.p, ct, cn, cq, &g[0], &buf[0], errLen) })
	if r == nil {
		return nil, cErr("creating a reader on "+topic, buf)
	}
	rd := &Reader{p: p, r: r, guid: guidFrom(&g), stop: make(chan struct{}), done: make(chan struct{})}
	p.readers[rd] = struct{}{}
	go rd.run(deliver)
	return rd, nil
}

func identityFrom(id *C.lbf_identity) Identity {
	var out Identity
	for i := range out.Writer {
		out.Writer[i] = byte(id.guid[i])
	}
	out.Seq = int64(id.seq)
	return out
}

func (r *Reader) run(deliver func(Sample)) {
	defer close(r.done)
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		var data unsafe.Pointer
		var size C.uint32_t
		var id, rel C.lbf_identity
		var ts C.int64_t
		switch C.lbf_take(r.r, C.int64_t(pollEvery.Milliseconds()), &data, &size, &id, &rel, &ts) {
		case 1:
			s := Sample{Data: C.GoBytes(data, C.int(size)), ID: identityFrom(&id), Related: identityFrom(&rel), SourceTime: int64(ts)}
			C.free(data)
			deliver(s)
		case 0:
		default:
			r.err = errors.New("fastdds: taking a sample failed")
			return
		}
	}
}

// GUID is the reader's GUID.
func (r *Reader) GUID() GUID { return r.guid }

// Matched is the number of writers the reader is matched with now.
func (r *Reader) Matched() (int, error) {
	n := C.lbf_reader_matched(r.r)
	if n < 0 {
		return 0, errors.New("fastdds: reading the subscription matched status failed")
	}
	return int(n), nil
}

// Close stops delivery, waiting for a deliver call in progress to return,
// and deletes the reader.
func (r *Reader) Close() error {
	r.once.Do(func() {
		close(r.stop)
		<-r.done
		C.lbf_reader_delete(r.r)
		r.p.mu.Lock()
		delete(r.p.readers, r)
		r.p.mu.Unlock()
	})
	return r.err
}

// Close closes the participant's readers and writers and deletes it.
func (p *Participant) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	readers := make([]*Reader, 0, len(p.readers))
	for r := range p.readers {
		readers = append(readers, r)
	}
	writers := make([]*Writer, 0, len(p.writers))
	for w := range p.writers {
		writers = append(writers, w)
	}
	p.mu.Unlock()
	for _, r := range readers {
		_ = r.Close()
	}
	for _, w := range writers {
		_ = w.Close()
	}
	C.lbf_participant_delete(p.p)
	return nil
}

// Built reports whether this binary has Fast DDS (the "ros2" build tag).
const Built = true
