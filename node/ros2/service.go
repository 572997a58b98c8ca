package ros2

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/lingbotmap/lingbotmap/msgs/cdr"
	"github.com/lingbotmap/lingbotmap/node/ros2/dds"
	"github.com/lingbotmap/lingbotmap/node/ros2/fastdds"
)

// Services answer clients of both ROS 2 RMWs a Jazzy user meets, which pair
// a reply with its request differently:
//
//   - rmw_cyclonedds_cpp puts a request header (the client's id and a
//     sequence number) between the encapsulation and the body of every
//     request and reply (requestHeader).
//   - rmw_fastrtps_cpp and rmw_fastrtps_dynamic_cpp send the bare body; a
//     request is named by its DDS sample identity (request writer GUID and
//     sequence number), and its reply must carry that name as inline QoS
//     (PID_RELATED_SAMPLE_IDENTITY), which Cyclone DDS 0.10 cannot write.
//
// So the requests are read, and Fast DDS clients answered, by a Fast DDS
// participant of the node's own (package fastdds); Cyclone clients get
// their replies from the node's Cyclone participant. The layout follows
// from two facts of discovery:
//
//   - A reader that matches a writer after the writer sent a sample gets it
//     from Fast DDS's reliability protocol, but not from Cyclone's, which
//     takes the first heartbeat of a non-Cyclone writer as the start of
//     the session (q_receive.c, handle_Heartbeat). A Fast DDS client calls
//     as soon as it has matched the service, so its request must go to
//     Fast DDS readers; Cyclone writers announce themselves before their
//     first sample, so Cyclone clients lose nothing to them either.
//   - An rmw_fastrtps client calls once its request writer has matched as
//     many readers as its reply reader has writers (rmw_fastrtps 8.4.1,
//     rmw_service_server_is_available.cpp:111-127). The service has two
//     reply writers (Cyclone's, Fast DDS's), so it has two request readers
//     on the Fast DDS participant; each request arrives at both and is
//     served once. rmw_cyclonedds clients pair the request reader and reply
//     writer by their serviceid, which only the Cyclone writer carries.
//
// Clients are told apart by the vendor id that starts the GUID of the
// request's writer (RTPS 9.3.1.5; Cyclone 01.10, Fast DDS 01.0f). A request
// that is malformed or comes from another vendor is logged and counted
// (Stats().BadRequests, on /diagnostics) and gets no reply. Without the
// Fast DDS participant (discovery off, or it could not start) a Cyclone
// reader takes the requests and only Cyclone clients are answered.

// replyWait bounds the wait for a client's reply reader to match before a
// reply is sent (rmw_cyclonedds waits the same way, for a shorter time).
const replyWait = time.Second

// fastReplyWait bounds that wait for an rmw_fastrtps client, whose reply
// reader the Fast DDS side may discover well after the Cyclone side got
// its request.
const fastReplyWait = 10 * time.Second

// The vendor ids of the DDS implementations under ROS 2's RMWs.
var (
	vendorCyclone = [2]byte{0x01, 0x10}
	vendorFastDDS = [2]byte{0x01, 0x0f}
)

// ServeTrigger offers the std_srvs/srv/Trigger service name (resolved) on
// rq/<name>Request and rr/<name>Reply. Requests are served one at a time,
// in the order they arrive; handle gets a context that ends with Close.
func (t *Transport) ServeTrigger(name string, handle func(ctx context.Context) (string, error)) (io.Closer, error) {
	srv, err := cdr.TriggerService()
	if err != nil {
		return nil, fmt.Errorf("ros2: service %s: %w", name, err)
	}
	return t.serve(name, srv, dds.QoS{Reliable: true, Depth: 10}, func(ctx context.Context, req []byte) ([]byte, error) {
		if err := unmarshal(req, &cdr.TriggerRequest{}); err != nil {
			return nil, err
		}
		msg, herr := handle(ctx)
		resp := &cdr.TriggerResponse{Success: herr == nil, Message: msg}
		if herr != nil {
			resp.Message = herr.Error()
		}
		return marshal(resp)
	})
}

// errBadRequest marks a request a service handler could not decode; the
// caller logs and counts it. unmarshal's *msgs.DecodeError is one too.
var errBadRequest = errors.New("bad request")

// serve offers service name of type srv with the QoS q (its UserData is
// the service's own) to clients of either RMW. handle
// gets each request as a CDR message (encapsulation header and body, no
// RMW header) and returns the reply the same way; a decoding error it
// returns (a *msgs.DecodeError, or one wrapping errBadRequest) counts as a
// bad request and gets no reply. Requests are served one at a time; handle
// gets a context that ends with Close.
func (t *Transport) serve(name string, srv cdr.ServiceType, q dds.QoS, handle func(ctx context.Context, req []byte) ([]byte, error)) (io.Closer, error) {
	pp, err := t.participant()
	if err != nil {
		return nil, err
	}
	// serviceid pairs the service's request reader and reply writer for
	// rmw_cyclonedds clients; every endpoint announces the hash of the
	// service as a whole.
	hash := typeHashUserData(srv.Hash)
	paired := "serviceid=" + pp.GUID().String() + "." + name + ";" + hash
	q.UserData = paired
	w, err := pp.NewWriter(replyTopic(name), srv.Response.DDSName, q)
	if err != nil {
		return nil, fmt.Errorf("ros2: offering service %s: %w", name, err)
	}
	s := &service{t: t, name: name, w: w, handle: handle, seen: map[fastdds.Identity]time.Time{}, stop: make(chan struct{})}
	// The readers' deliver functions use the endpoints; the lock orders
	// storing them before that use.
	s.mu.Lock()
	if fp := t.fastParticipant(); fp != nil {
		err = s.openFastDDSLocked(fp, srv, q, hash)
	} else {
		s.r, err = pp.NewReader(requestTopic(name), srv.Request.DDSName, q, s.serveCyclone)
	}
	s.mu.Unlock()
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("ros2: offering service %s: %w", name, err)
	}
	t.addEntity(t.writers, w.GUID())
	if s.r != nil {
		t.addEntity(t.readers, s.r.GUID())
	}
	if len(s.fr) > 0 {
		// ros_discovery_info lists one reader and one writer per service,
		// as for an rclcpp node.
		t.addEntity(t.readers, dds.GUID(s.fr[0].GUID()))
	}
	return s, nil
}

type service struct {
	t      *Transport
	name   string
	w      *dds.Writer // replies to Cyclone clients
	handle func(ctx context.Context, req []byte) ([]byte, error)

	mu   sync.Mutex
	r    *dds.Reader       // requests, only without the Fast DDS side
	fr   []*fastdds.Reader // requests (two readers: see above)
	fw   *fastdds.Writer   // replies to Fast DDS clients
	seen map[fastdds.Identity]time.Time

	call    sync.Mutex // one request at a time
	stop    chan struct{}
	pending sync.WaitGroup // replies waiting for their client's reader
	once    sync.Once
}

// openFastDDSLocked opens the service's request readers and its reply
// writer for Fast DDS clients on the Fast DDS participant.
func (s *service) openFastDDSLocked(fp *fastdds.Participant, srv cdr.ServiceType, q dds.QoS, hash string) error {
	fq := fastdds.QoS{Reliable: q.Reliable, TransientLocal: q.TransientLocal, Depth: q.Depth, UserData: hash}
	fw, err := fp.NewWriter(replyTopic(s.name), srv.Response.DDSName, fq)
	if err != nil {
		return err
	}
	s.fw = fw
	for range 2 {
		fq.UserData = q.UserData // the serviceid rmw_cyclonedds clients pair by
		fr, err := fp.NewReader(requestTopic(s.name), srv.Request.DDSName, fq, s.serveRequest)
		if err != nil {
			return err
		}
		s.fr = append(s.fr, fr)
	}
	return nil
}

// reject logs a request the service cannot answer and counts it.
func (s *service) reject(rmw string, client fmt.Stringer, why error) {
	s.t.badRequests.Add(1)
	s.t.log.Warn("service request rejected", "service", s.name, "client_rmw", rmw, "client", client.String(), "err", why)
}

func vendorOf(g [16]byte) [2]byte { return [2]byte{g[0], g[1]} }

// seenFor is how long a request is remembered, to drop its second arrival.
const seenFor = time.Minute

// firstArrival reports whether request id arrives for the first time (each
// arrives once at each of the two readers).
func (s *service) firstArrival(id fastdds.Identity) bool {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.seen[id]; dup {
		delete(s.seen, id)
		return false
	}
	for k, at := range s.seen {
		if now.Sub(at) > seenFor {
			delete(s.seen, k)
		}
	}
	s.seen[id] = now
	return true
}

// serveRequest handles a request read by the Fast DDS side, from a client
// of either RMW.
func (s *service) serveRequest(sample fastdds.Sample) {
	if !s.firstArrival(sample.ID) {
		return
	}
	wg := sample.ID.Writer
	switch v := vendorOf(wg); v {
	case vendorFastDDS:
		s.serveFast(sample.ID, sample.Related, sample.Data)
	case vendorCyclone:
		var prefix [12]byte
		copy(prefix[:], wg[:12])
		s.serveHeader(sample.Data, wg, func() bool { return s.w.WaitParticipantReader(prefix, replyWait) })
	default:
		s.reject("unknown", wg, fmt.Errorf("request from DDS vendor %02x.%02x, which is neither Cyclone DDS (rmw_cyclonedds) nor Fast DDS (rmw_fastrtps)", v[0], v[1]))
	}
}

// serveCyclone handles a request read by the Cyclone reader, which exists
// only without the Fast DDS side: Cyclone clients are answered, the others
// rejected.
func (s *service) serveCyclone(sample dds.Sample) {
	s.mu.Lock()
	r := s.r
	s.mu.Unlock()
	wg, ok := r.WriterGUID(sample.Publication)
	if !ok {
		s.t.log.Warn("service client gone before its request was served", "service", s.name)
		return
	}
	switch v := vendorOf(wg); v {
	case vendorCyclone:
		s.serveHeader(sample.Data, wg, func() bool {
			ok, err := s.w.WaitClientReader(r, sample.Publication, replyWait)
			return err == nil && ok
		})
	case vendorFastDDS:
		s.reject("rmw_fastrtps", wg, errors.New("a Fast DDS client, and this node has no Fast DDS participant to answer it (see the log at start)"))
	default:
		s.reject("unknown", wg, fmt.Errorf("request from DDS vendor %02x.%02x, which is neither Cyclone DDS (rmw_cyclonedds) nor Fast DDS (rmw_fastrtps)", v[0], v[1]))
	}
}

// serveHeader answers an rmw_cyclonedds client: the request header comes
// back in front of the reply, sent by the Cyclone writer once clientMatched
// says it has matched the client's reply reader.
func (s *service) serveHeader(data []byte, client fmt.Stringer, clientMatched func() bool) {
	h, body, err := splitRequest(data)
	if err != nil {
		s.reject("rmw_cyclonedds", client, err)
		return
	}
	b, ok := s.call1(body, "rmw_cyclonedds", client)
	if !ok {
		return
	}
	if b, err = joinRequest(h, b); err != nil {
		s.t.log.Error("encoding a service reply", "service", s.name, "err", err)
		return
	}
	if !clientMatched() {
		s.t.log.Warn("service client gone before its reply", "service", s.name, "client", client.String())
		return
	}
	if err := s.w.Write(b); err != nil {
		s.t.log.Warn("sending a service reply", "service", s.name, "err", err)
	}
}

// entityIsReader is the bit of an RTPS entity kind (the GUID's last byte)
// that readers have and writers lack (RTPS 9.3.1.2).
const entityIsReader = 0x04

// serveFast answers an rmw_fastrtps client's request id (with the related
// identity the client attached) as rmw_fastrtps (jazzy, 8.4.1) does:
//   - the client writes the request with its reply reader's GUID as the
//     related sample identity's writer GUID (rmw_request.cpp:61);
//   - the server names the request by its sample identity, with that reader
//     GUID in place of the writer GUID when present (rmw_request.cpp:111-117);
//   - the reply carries that name as its related sample identity
//     (rmw_response.cpp:119-126), sent once the reply writer has matched the
//     reader it names (rmw_response.cpp:137-156);
//   - the client keeps a reply only if the related identity's GUID is its
//     reply reader's or its request writer's, and hands it to the call with
//     the related sequence number (rmw_response.cpp:71-88).
func (s *service) serveFast(id, related fastdds.Identity, body []byte) {
	b, ok := s.call1(body, "rmw_fastrtps", id.Writer)
	if !ok {
		return
	}
	to := id
	if !related.Writer.IsZero() {
		to.Writer = related.Writer
	}
	// The reply waits for the client's reader without holding up the
	// requests behind it.
	s.pending.Add(1)
	go func() {
		defer s.pending.Done()
		if to.Writer[15]&entityIsReader != 0 && !s.waitFastReader(to.Writer) {
			s.t.log.Warn("service client gone before its reply", "service", s.name, "client", to.Writer.String())
			return
		}
		if err := s.fw.Write(b, to); err != nil {
			s.t.log.Warn("sending a service reply", "service", s.name, "err", err)
		}
	}()
}

// waitFastReader waits until the Fast DDS reply writer has matched reader
// g, for fastReplyWait at most or until Close.
func (s *service) waitFastReader(g fastdds.GUID) bool {
	end := time.Now().Add(fastReplyWait)
	for time.Now().Before(end) {
		if s.fw.WaitReader(g, 100*time.Millisecond) {
			return true
		}
		select {
		case <-s.stop:
			return false
		default:
		}
	}
	return false
}

// call1 runs the handler on one request body; false when there is nothing
// to send (a bad request, rejected and counted, or a reply that could not
// be encoded).
func (s *service) call1(body []byte, rmw string, client fmt.Stringer) ([]byte, bool) {
	s.call.Lock()
	defer s.call.Unlock()
	b, err := s.handle(s.t.ctx, body)
	if err != nil {
		if isBadRequest(err) {
			s.reject(rmw, client, err)
		} else {
			s.t.log.Error("encoding a service reply", "service", s.name, "err", err)
		}
		return nil, false
	}
	return b, true
}

func (s *service) Close() error {
	var err error
	s.once.Do(func() {
		close(s.stop)
		s.mu.Lock()
		r, frs, fw := s.r, s.fr, s.fw
		s.mu.Unlock()
		keep := func(e error) {
			if e != nil && err == nil {
				err = e
			}
		}
		for i, fr := range frs {
			keep(fr.Close())
			if i == 0 {
				s.t.removeEntity(s.t.readers, dds.GUID(fr.GUID()))
			}
		}
		if r != nil {
			keep(r.Close())
			s.t.removeEntity(s.t.readers, r.GUID())
		}
		s.pending.Wait()
		if fw != nil {
			keep(fw.Close())
		}
		keep(s.w.Close())
		s.t.removeEntity(s.t.writers, s.w.GUID())
	})
	return err
}
