//go:build ros2

package dds

/*
#cgo LDFLAGS: -lddsc
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"math"
	"sync"
	"time"
	"unsafe"
)

func ddsErr(op string, rc C.dds_return_t) error {
	return &Error{Op: op, Code: int32(rc), Msg: C.GoString(C.dds_strretcode(rc))}
}

func guidOf(e C.dds_entity_t) GUID {
	var g C.dds_guid_t
	var out GUID
	if C.dds_get_guid(e, &g) == C.DDS_RETCODE_OK {
		out = *(*GUID)(unsafe.Pointer(&g.v[0]))
	}
	return out
}

// Participant is a DDS domain participant. Its methods are safe for
// concurrent use.
type Participant struct {
	pp, domain C.dds_entity_t
	guid       GUID

	mu      sync.Mutex
	readers map[*Reader]struct{}
	writers map[*Writer]struct{}
	closed  bool
}

// NewParticipant creates a participant with cfg.
func NewParticipant(cfg ParticipantConfig) (*Participant, error) {
	xml := C.CString(cfg.XML)
	defer C.free(unsafe.Pointer(xml))
	ud := C.CString(cfg.UserData)
	defer C.free(unsafe.Pointer(ud))
	var dom C.dds_entity_t
	pp := C.lbm_participant(C.uint32_t(cfg.Domain), xml, unsafe.Pointer(ud), C.size_t(len(cfg.UserData)), &dom)
	if pp < 0 {
		return nil, ddsErr(fmt.Sprintf("creating a participant on domain %d", cfg.Domain), pp)
	}
	return &Participant{pp: pp, domain: dom, guid: guidOf(pp), readers: map[*Reader]struct{}{}, writers: map[*Writer]struct{}{}}, nil
}

// GUID is the participant's GUID.
func (p *Participant) GUID() GUID { return p.guid }

func (p *Participant) topic(name, typeName string) (C.dds_entity_t, error) {
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	ct := C.CString(typeName)
	defer C.free(unsafe.Pointer(ct))
	tp := C.lbm_topic(p.pp, cn, ct)
	if tp < 0 {
		return 0, ddsErr(fmt.Sprintf("creating topic %s (%s)", name, typeName), tp)
	}
	return tp, nil
}

// withQoS calls f with q in C form; the USER_DATA bytes live until f returns.
func withQoS(q QoS, f func(*C.lbm_qos)) {
	depth := q.Depth
	if depth < 1 {
		depth = 1
	}
	cq := C.lbm_qos{depth: C.int32_t(min(depth, math.MaxInt32)), lifespan_ns: C.int64_t(q.Lifespan)}
	if q.Reliable {
		cq.reliable = 1
	}
	if q.TransientLocal {
		cq.transient_local = 1
	}
	if q.UserData != "" {
		ud := C.CString(q.UserData)
		defer C.free(unsafe.Pointer(ud))
		cq.user_data = unsafe.Pointer(ud)
		cq.user_data_len = C.size_t(len(q.UserData))
	}
	f(&cq)
}

// Writer writes raw CDR samples on one topic.
type Writer struct {
	p    *Participant
	ent  C.dds_entity_t
	guid GUID
	ih   uint64
	once sync.Once
}

// NewWriter creates a writer on topic with the raw-CDR type typeName (the
// DDS type name, e.g. "geometry_msgs::msg::dds_::PoseStamped_").
func (p *Participant) NewWriter(topic, typeName string, q QoS) (*Writer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("dds: creating a writer on %s: participant closed", topic)
	}
	tp, err := p.topic(topic, typeName)
	if err != nil {
		return nil, err
	}
	// The writer holds its own reference to the topic.
	defer C.dds_delete(tp)
	var wr C.dds_entity_t
	withQoS(q, func(cq *C.lbm_qos) { wr = C.lbm_writer(p.pp, tp, cq) })
	if wr < 0 {
		return nil, ddsErr("creating a writer on "+topic, wr)
	}
	var ih C.dds_instance_handle_t
	if rc := C.dds_get_instance_handle(wr, &ih); rc < 0 {
		C.dds_delete(wr)
		return nil, ddsErr("reading the instance handle of the writer on "+topic, rc)
	}
	w := &Writer{p: p, ent: wr, guid: guidOf(wr), ih: uint64(ih)}
	p.writers[w] = struct{}{}
	return w, nil
}

// Write publishes one serialized sample (with its encapsulation header).
func (w *Writer) Write(b []byte) error {
	if len(b) > math.MaxUint32-3 {
		return fmt.Errorf("dds: sample of %d bytes is too large", len(b))
	}
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	if rc := C.lbm_write(w.ent, p, C.uint32_t(len(b))); rc < 0 {
		return ddsErr("writing", rc)
	}
	return nil
}

// GUID is the writer's GUID.
func (w *Writer) GUID() GUID { return w.guid }

// InstanceHandle is the writer's instance handle, the value rmw_cyclonedds
// puts in a request header as the client id.
func (w *Writer) InstanceHandle() uint64 { return w.ih }

// Matched is the number of readers the writer is matched with now.
func (w *Writer) Matched() (int, error) {
	var st C.dds_publication_matched_status_t
	if rc := C.dds_get_publication_matched_status(w.ent, &st); rc < 0 {
		return 0, ddsErr("reading the publication matched status", rc)
	}
	return int(st.current_count), nil
}

// WaitClientReader waits up to timeout until w has matched the reply reader
// of the service client whose request writer is pub (as seen by the request
// reader rd), as rmw_cyclonedds does before replying. It returns false when
// that client's request writer is gone or the time ran out.
func (w *Writer) WaitClientReader(rd *Reader, pub uint64, timeout time.Duration) (bool, error) {
	end := time.Now().Add(timeout)
	for {
		switch C.lbm_client_reader_matched(rd.ent, w.ent, C.dds_instance_handle_t(pub)) {
		case 1:
			return true, nil
		case -1:
			return false, nil
		}
		if time.Now().After(end) {
			return false, nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// WaitParticipantReader waits up to timeout until w has matched a reader
// of the participant whose GUID prefix is prefix (a service client's reply
// reader, known by its request writer's GUID).
func (w *Writer) WaitParticipantReader(prefix [12]byte, timeout time.Duration) bool {
	end := time.Now().Add(timeout)
	for {
		if C.lbm_reader_of_participant(w.ent, (*C.uchar)(unsafe.Pointer(&prefix[0]))) == 1 {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Close deletes the writer; matched readers see it go.
func (w *Writer) Close() error {
	var err error
	w.once.Do(func() {
		if rc := C.dds_delete(w.ent); rc < 0 {
			err = ddsErr("deleting a writer", rc)
		}
		w.p.mu.Lock()
		delete(w.p.writers, w)
		w.p.mu.Unlock()
	})
	return err
}

// Reader receives raw CDR samples on one topic and hands each to its
// deliver function, from one goroutine of its own.
type Reader struct {
	p                  *Participant
	ent, cond, ws, gcd C.dds_entity_t
	guid               GUID
	done               chan struct{}
	once               sync.Once
	err                error
}

// NewReader creates a reader on topic and starts delivering its samples to
// deliver, one at a time; while deliver blocks, samples queue up in the
// reader's history (keep-last q.Depth).
func (p *Participant) NewReader(topic, typeName string, q QoS, deliver func(Sample)) (*Reader, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("dds: creating a reader on %s: participant closed", topic)
	}
	tp, err := p.topic(topic, typeName)
	if err != nil {
		return nil, err
	}
	defer C.dds_delete(tp)
	r := &Reader{p: p, done: make(chan struct{})}
	withQoS(q, func(cq *C.lbm_qos) { r.ent = C.lbm_reader(p.pp, tp, cq) })
	if r.ent < 0 {
		return nil, ddsErr("creating a reader on "+topic, r.ent)
	}
	fail := func(op string, rc C.dds_entity_t) (*Reader, error) {
		r.deleteAll()
		return nil, ddsErr(op+" for "+topic, rc)
	}
	if r.cond = C.dds_create_readcondition(r.ent, C.DDS_ANY_STATE); r.cond < 0 {
		return fail("creating a read condition", r.cond)
	}
	if r.gcd = C.dds_create_guardcondition(p.pp); r.gcd < 0 {
		return fail("creating a guard condition", r.gcd)
	}
	if r.ws = C.dds_create_waitset(p.pp); r.ws < 0 {
		return fail("creating a waitset", r.ws)
	}
	if rc := C.dds_waitset_attach(r.ws, r.cond, 0); rc < 0 {
		return fail("attaching the read condition", rc)
	}
	if rc := C.dds_waitset_attach(r.ws, r.gcd, 0); rc < 0 {
		return fail("attaching the guard condition", rc)
	}
	r.guid = guidOf(r.ent)
	p.readers[r] = struct{}{}
	go r.run(deliver)
	return r, nil
}

func (r *Reader) run(deliver func(Sample)) {
	defer close(r.done)
	for {
		if rc := C.dds_waitset_wait(r.ws, nil, 0, C.DDS_INFINITY); rc < 0 {
			r.err = ddsErr("waiting for samples", rc)
			return
		}
		var triggered C.bool
		C.dds_read_guardcondition(r.gcd, &triggered)
		if triggered {
			return
		}
		for {
			var sd *C.struct_ddsi_serdata
			var data *C.uchar
			var size C.uint32_t
			var pub C.dds_instance_handle_t
			var ts C.int64_t
			n := C.lbm_take(r.ent, &sd, &data, &size, &pub, &ts)
			if n <= 0 {
				break
			}
			s := Sample{Data: C.GoBytes(unsafe.Pointer(data), C.int(size)), Publication: uint64(pub), SourceTime: int64(ts)}
			C.lbm_release(sd)
			deliver(s)
		}
	}
}

// GUID is the reader's GUID.
func (r *Reader) GUID() GUID { return r.guid }

// WriterGUID is the GUID of the matched writer this reader knows as pub
// (a Sample's Publication); false when that writer is gone.
func (r *Reader) WriterGUID(pub uint64) (GUID, bool) {
	var g GUID
	ok := C.lbm_publication_guid(r.ent, C.dds_instance_handle_t(pub), (*C.uchar)(unsafe.Pointer(&g[0]))) == 1
	return g, ok
}

// Matched is the number of writers the reader is matched with now.
func (r *Reader) Matched() (int, error) {
	var st C.dds_subscription_matched_status_t
	if rc := C.dds_get_subscription_matched_status(r.ent, &st); rc < 0 {
		return 0, ddsErr("reading the subscription matched status", rc)
	}
	return int(st.current_count), nil
}

func (r *Reader) deleteAll() {
	for _, e := range []C.dds_entity_t{r.ws, r.gcd, r.cond, r.ent} {
		if e > 0 {
			C.dds_delete(e)
		}
	}
}

// Close stops delivery, waiting for a deliver call in progress to return,
// and deletes the reader; matched writers see it go.
func (r *Reader) Close() error {
	r.once.Do(func() {
		C.dds_set_guardcondition(r.gcd, true)
		<-r.done
		r.deleteAll()
		r.p.mu.Lock()
		delete(r.p.readers, r)
		r.p.mu.Unlock()
	})
	return r.err
}

// Close closes the participant's readers and writers and deletes it; peers
// see them go.
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
	var err error
	if rc := C.dds_delete(p.pp); rc < 0 {
		err = ddsErr("deleting the participant", rc)
	}
	if p.domain > 0 {
		if rc := C.dds_delete(p.domain); rc < 0 && err == nil {
			err = ddsErr("deleting the domain", rc)
		}
	}
	return err
}

// Built reports whether this binary has Cyclone DDS (the "ros2" build tag).
const Built = true
