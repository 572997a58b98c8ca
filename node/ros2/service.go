package ros2

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/lingbotmap/lingbotmap/msgs/cdr"
	"github.com/lingbotmap/lingbotmap/node/ros2/dds"
)

// replyWait bounds the wait for a client's reply reader to match before a
// reply is sent (rmw_cyclonedds waits the same way, for a shorter time).
const replyWait = time.Second

// ServeTrigger offers the std_srvs/srv/Trigger service name (resolved) on
// rq/<name>Request and rr/<name>Reply. Requests are served one at a time,
// in the order they arrive; handle gets a context that ends with Close.
func (t *Transport) ServeTrigger(name string, handle func(ctx context.Context) (string, error)) (io.Closer, error) {
	pp, err := t.participant()
	if err != nil {
		return nil, err
	}
	srv, err := cdr.TriggerService()
	if err != nil {
		return nil, fmt.Errorf("ros2: service %s: %w", name, err)
	}
	// serviceid pairs the service's reader and writer for peers, as rmw
	// does; both announce the hash of the service as a whole.
	q := dds.QoS{Reliable: true, Depth: 10,
		UserData: "serviceid=" + pp.GUID().String() + "." + name + ";" + typeHashUserData(srv.Hash)}
	w, err := pp.NewWriter(replyTopic(name), srv.Response.DDSName, q)
	if err != nil {
		return nil, fmt.Errorf("ros2: offering service %s: %w", name, err)
	}
	s := &service{t: t, name: name, w: w, handle: handle}
	// The reader's deliver function needs the reader; it runs only after
	// NewReader returned, so the lock orders the assignment before use.
	s.mu.Lock()
	r, err := pp.NewReader(requestTopic(name), srv.Request.DDSName, q, s.serve)
	if err != nil {
		s.mu.Unlock()
		w.Close()
		return nil, fmt.Errorf("ros2: offering service %s: %w", name, err)
	}
	s.r = r
	s.mu.Unlock()
	t.addEntity(t.writers, w.GUID())
	t.addEntity(t.readers, r.GUID())
	return s, nil
}

type service struct {
	t      *Transport
	name   string
	w      *dds.Writer
	handle func(ctx context.Context) (string, error)

	mu   sync.Mutex
	r    *dds.Reader
	once sync.Once
}

func (s *service) serve(sample dds.Sample) {
	s.mu.Lock()
	r := s.r
	s.mu.Unlock()
	h, body, err := splitRequest(sample.Data)
	if err == nil {
		err = unmarshal(body, &cdr.TriggerRequest{})
	}
	if err != nil {
		s.t.log.Warn("bad service request", "service", s.name, "err", err)
		return
	}
	msg, herr := s.handle(s.t.ctx)
	resp := &cdr.TriggerResponse{Success: herr == nil, Message: msg}
	if herr != nil {
		resp.Message = herr.Error()
	}
	b, err := marshal(resp)
	if err == nil {
		b, err = joinRequest(h, b)
	}
	if err != nil {
		s.t.log.Error("encoding a service reply", "service", s.name, "err", err)
		return
	}
	ok, err := s.w.WaitClientReader(r, sample.Publication, replyWait)
	if err != nil || !ok {
		s.t.log.Warn("service client gone before its reply", "service", s.name, "err", err)
		return
	}
	if err := s.w.Write(b); err != nil {
		s.t.log.Warn("sending a service reply", "service", s.name, "err", err)
	}
}

func (s *service) Close() error {
	var err error
	s.once.Do(func() {
		err = s.r.Close()
		if werr := s.w.Close(); werr != nil && err == nil {
			err = werr
		}
		s.t.removeEntity(s.t.readers, s.r.GUID())
		s.t.removeEntity(s.t.writers, s.w.GUID())
	})
	return err
}
