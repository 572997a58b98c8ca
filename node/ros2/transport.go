// Package ros2 is the ROS 2 transport of the node (node.Transport): DDS
// through Cyclone DDS (package dds), messages as CDR (package msgs/cdr),
// ROS 2 names, QoS, services and command-line conventions, and the
// ros_discovery_info that makes the node visible to `ros2 node list`.
//
// Building: the DDS part is cgo against Debian's Cyclone DDS 0.10 and, for
// the service clients of rmw_fastrtps (service.go), Fast DDS 2.9 (apt-get
// install cyclonedds-dev libfastrtps-dev); it is compiled only with the
// build tag "ros2" (go build -tags ros2 ./cmd/lingbotmap); without it New
// returns dds.ErrNotBuilt and the rest of the program is unchanged.
//
// Testing: go test -tags ros2 ./node/ros2/... as root, with cyclonedds-dev,
// cyclonedds-tools (idlc) and gcc; the test binaries re-run themselves
// inside ../shared/tools/netns-run.sh and talk to Cyclone C peers built from
// ../shared/tools/ros2-peers and ros2test/testdata.
//
// A typical composition (cmd):
//
//	a, rest, err := ros2.ParseArgs(os.Args[1:], os.Getenv, "lingbotmap")
//	tr, err := ros2.New(a, logger)
//	err = tr.Connect(ctx)
package ros2

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/lingbotmap/lingbotmap/msgs"
	"github.com/lingbotmap/lingbotmap/msgs/cdr"
	"github.com/lingbotmap/lingbotmap/node"
	"github.com/lingbotmap/lingbotmap/node/ros2/dds"
	"github.com/lingbotmap/lingbotmap/node/ros2/fastdds"
)

// Transport is a ROS 2 node's view of DDS. Its methods are safe for
// concurrent use.
type Transport struct {
	args Args
	log  *slog.Logger

	ctx    context.Context // ends with Close; services' handlers get it
	cancel context.CancelFunc

	mu      sync.Mutex
	pp      *dds.Participant
	info    *dds.Writer // ros_discovery_info
	graph   *graphWatch // reads the peers' ros_discovery_info
	readers map[dds.GUID]struct{}
	writers map[dds.GUID]struct{}
	// subs and pubs name the topic of each open reader and writer, for the
	// matched counts in Stats.
	subs   map[*dds.Reader]string
	pubs   map[*dds.Writer]string
	closed bool
	gid    int // the Gid size of the ros_discovery_info we write

	// logs is the node logger's /rosout side, when its handler is a
	// LogHandler (rosout.go).
	logs *logShared

	// fast is the Fast DDS participant that answers rmw_fastrtps service
	// clients (service.go), made with the first service; fastTried says
	// that was attempted (nil fast then: off or failed, logged).
	fast      *fastdds.Participant
	fastTried bool

	badRequests atomic.Int64 // service requests rejected (service.go)
}

var _ node.Transport = (*Transport)(nil)

// New makes a transport for the node described by a (see ParseArgs); it
// joins the graph on Connect. log may be nil.
func New(a Args, log *slog.Logger) (*Transport, error) {
	if !dds.Built {
		return nil, dds.ErrNotBuilt
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if a.Params == nil {
		a.Params = newParams()
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &Transport{
		args: a, log: log.With("transport", "ros2"), ctx: ctx, cancel: cancel,
		readers: map[dds.GUID]struct{}{}, writers: map[dds.GUID]struct{}{},
		subs: map[*dds.Reader]string{}, pubs: map[*dds.Writer]string{},
	}
	if h, ok := log.Handler().(*LogHandler); ok {
		t.logs = h.sh
	}
	return t, nil
}

// Connect creates the DDS participant (USER_DATA "enclave=/;") and starts
// publishing ros_discovery_info.
func (t *Transport) Connect(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pp != nil || t.closed {
		return errors.New("ros2: Connect called twice or after Close")
	}
	cfg := dds.ParticipantConfig{
		Domain:   t.args.Domain,
		XML:      cycloneConfig(t.args.Discovery, t.args.StaticPeers, os.Getpid(), os.Getenv("CYCLONEDDS_URI")),
		UserData: "enclave=/;",
	}
	gidSize, gidFrom, err := t.gidSize()
	if err != nil {
		return err
	}
	pp, err := dds.NewParticipant(cfg)
	if err != nil {
		return fmt.Errorf("ros2: joining DDS domain %d: %w", t.args.Domain, err)
	}
	dt, err := cdr.DiscoveryType(gidSize)
	if err != nil {
		pp.Close()
		return fmt.Errorf("ros2: ros_discovery_info: %w", err)
	}
	qos := dds.QoS{Reliable: true, TransientLocal: true, Depth: 1, UserData: typeHashUserData(dt.Hash)}
	info, err := pp.NewWriter(discoveryTopic, dt.DDSName, qos)
	if err != nil {
		pp.Close()
		return fmt.Errorf("ros2: opening ros_discovery_info: %w", err)
	}
	t.pp, t.info, t.gid = pp, info, gidSize
	if err := t.openRosoutLocked(pp); err != nil {
		pp.Close()
		t.pp, t.info = nil, nil
		return err
	}
	if err := t.publishInfoLocked(true); err != nil {
		t.closeRosout()
		pp.Close()
		t.pp, t.info = nil, nil
		return err
	}
	g, err := watchGraph(pp, dt.DDSName, qos, gidSize, pp.GUID(), t.log)
	if err != nil {
		pp.Close()
		t.pp, t.info = nil, nil
		return err
	}
	t.graph = g
	t.log.Info("joined the ROS 2 graph", "node", t.FullName(), "domain", t.args.Domain,
		"participant", pp.GUID().String(), "gid_bytes", gidSize, "gid_from", gidFrom)
	return nil
}

// FullName is the node's absolute name.
func (t *Transport) FullName() string { return t.args.FullName() }

// Resolve expands name with the node's namespace and applies the remaps.
func (t *Transport) Resolve(name string) string { return t.args.Resolve(name) }

// Params serves the -p and --params-file values.
func (t *Transport) Params() node.ParamSource { return t.args.Params }

// Shutdown is never closed: ROS 2 has no request to stop a node.
func (t *Transport) Shutdown() <-chan struct{} { return nil }

// Stats counts the peers whose ros_discovery_info the node cannot share
// (the other Gid size, or undecodable) and the service requests rejected
// (malformed, or from an RMW the node cannot answer); DDS has no master to
// reconnect to. It also counts, per topic, the remote endpoints DDS has
// matched with the node's readers and writers, which tests and users can
// wait on instead of guessing when discovery is done.
func (t *Transport) Stats() node.TransportStats {
	t.mu.Lock()
	g := t.graph
	subs := make(map[*dds.Reader]string, len(t.subs))
	for r, name := range t.subs {
		subs[r] = name
	}
	pubs := make(map[*dds.Writer]string, len(t.pubs))
	for w, name := range t.pubs {
		pubs[w] = name
	}
	t.mu.Unlock()
	var st node.TransportStats
	if g != nil {
		st = g.stats()
	}
	st.BadRequests = t.badRequests.Load()
	st.MatchedPublishers = map[string]int{}
	for r, name := range subs {
		if n, err := r.Matched(); err == nil {
			st.MatchedPublishers[name] += n
		}
	}
	st.MatchedSubscribers = map[string]int{}
	for w, name := range pubs {
		if n, err := w.Matched(); err == nil {
			st.MatchedSubscribers[name] += n
		}
	}
	return st
}

// fastParticipant is the Fast DDS participant for rmw_fastrtps service
// clients, created on first use with the discovery range of the Cyclone
// one; nil when discovery is off or it could not be created (logged once:
// those clients' requests are then rejected and counted).
func (t *Transport) fastParticipant() *fastdds.Participant {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fastTried || t.closed {
		return t.fast
	}
	t.fastTried = true
	cfg := fastdds.ParticipantConfig{Domain: t.args.Domain, Peers: t.args.StaticPeers, UserData: "enclave=/;"}
	switch t.args.Discovery {
	case DiscoveryOff:
		t.log.Info("no Fast DDS participant for rmw_fastrtps service clients: discovery is off")
		return nil
	case DiscoveryLocalhost:
		cfg.LocalhostOnly = true
	}
	fp, err := fastdds.NewParticipant(cfg)
	if err != nil {
		t.log.Error("no Fast DDS participant: rmw_fastrtps service clients get no replies", "err", err)
		return nil
	}
	t.fast = fp
	t.log.Info("answering rmw_fastrtps service clients through a Fast DDS participant", "participant", fp.GUID().String())
	return fp
}

// isBadRequest tells a request that could not be decoded from a failure
// of the node's own.
func isBadRequest(err error) bool {
	var de *msgs.DecodeError
	return errors.As(err, &de) || errors.Is(err, errBadRequest)
}

// qosOf maps a topic's role to the QoS ROS 2 users expect.
func qosOf(r node.Role) (dds.QoS, error) {
	switch r {
	case node.RoleSensor:
		return dds.QoS{Reliable: false, Depth: 5}, nil
	case node.RoleOutput:
		return dds.QoS{Reliable: true, Depth: 10}, nil
	case node.RoleLatched, node.RoleTFStatic:
		return dds.QoS{Reliable: true, TransientLocal: true, Depth: 1}, nil
	case node.RoleTF:
		return dds.QoS{Reliable: true, Depth: 100}, nil
	}
	return dds.QoS{}, fmt.Errorf("ros2: unknown topic role %d", r)
}

func (t *Transport) participant() (*dds.Participant, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errors.New("ros2: transport closed")
	}
	if t.pp == nil {
		return nil, errors.New("ros2: not connected (call Connect first)")
	}
	return t.pp, nil
}

// endpoint opens what a topic needs: its type, QoS and the participant.
func (t *Transport) endpoint(spec node.TopicSpec) (*dds.Participant, msgType, dds.QoS, error) {
	pp, err := t.participant()
	if err != nil {
		return nil, msgType{}, dds.QoS{}, err
	}
	mt, err := typeOf(spec.Type)
	if err != nil {
		return nil, msgType{}, dds.QoS{}, fmt.Errorf("ros2: topic %s: %w", spec.Name, err)
	}
	q, err := qosOf(spec.Role)
	if err != nil {
		return nil, msgType{}, dds.QoS{}, err
	}
	if spec.BestEffort {
		q.Reliable = false
	}
	q.UserData = typeHashUserData(mt.Hash)
	return pp, mt, q, nil
}

// Advertise opens a writer on rt/<spec.Name>.
func (t *Transport) Advertise(spec node.TopicSpec) (node.Publisher, error) {
	pp, mt, q, err := t.endpoint(spec)
	if err != nil {
		return nil, err
	}
	w, err := pp.NewWriter(topicName(spec.Name), mt.DDSName, q)
	if err != nil {
		return nil, fmt.Errorf("ros2: advertising %s: %w", spec.Name, err)
	}
	t.addEntity(t.writers, w.GUID())
	t.mu.Lock()
	t.pubs[w] = spec.Name
	t.mu.Unlock()
	return &publisher{t: t, w: w, name: spec.Name, typ: reflect.TypeOf(spec.Type)}, nil
}

type publisher struct {
	t    *Transport
	w    *dds.Writer
	name string
	typ  reflect.Type
	once sync.Once
}

func (p *publisher) Write(msg any) error {
	if reflect.TypeOf(msg) != p.typ {
		return fmt.Errorf("ros2: publishing a %T on %s, which carries %v", msg, p.name, p.typ)
	}
	b, err := marshal(msg)
	if err != nil {
		return fmt.Errorf("ros2: encoding a message for %s: %w", p.name, err)
	}
	if err := p.w.Write(b); err != nil {
		return fmt.Errorf("ros2: publishing on %s: %w", p.name, err)
	}
	return nil
}

func (p *publisher) Close() error {
	var err error
	p.once.Do(func() {
		p.t.mu.Lock()
		delete(p.t.pubs, p.w)
		p.t.mu.Unlock()
		err = p.w.Close()
		p.t.removeEntity(p.t.writers, p.w.GUID())
	})
	return err
}

// Subscribe opens a reader on rt/<spec.Name> and decodes each sample into a
// new value of spec.Type's type.
func (t *Transport) Subscribe(spec node.TopicSpec, handle func(msg any, err error)) (io.Closer, error) {
	pp, mt, q, err := t.endpoint(spec)
	if err != nil {
		return nil, err
	}
	typ := reflect.TypeOf(spec.Type)
	if typ.Kind() != reflect.Pointer {
		return nil, fmt.Errorf("ros2: topic %s: Type must be a pointer to a message struct, not %v", spec.Name, typ)
	}
	r, err := pp.NewReader(topicName(spec.Name), mt.DDSName, q, func(s dds.Sample) {
		msg := reflect.New(typ.Elem()).Interface()
		if err := unmarshal(s.Data, msg); err != nil {
			handle(nil, err)
			return
		}
		handle(msg, nil)
	})
	if err != nil {
		return nil, fmt.Errorf("ros2: subscribing to %s: %w", spec.Name, err)
	}
	t.addEntity(t.readers, r.GUID())
	t.mu.Lock()
	t.subs[r] = spec.Name
	t.mu.Unlock()
	return closerFunc(func() error {
		t.mu.Lock()
		delete(t.subs, r)
		t.mu.Unlock()
		err := r.Close()
		t.removeEntity(t.readers, r.GUID())
		return err
	}), nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

func (t *Transport) addEntity(set map[dds.GUID]struct{}, g dds.GUID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	set[g] = struct{}{}
	if err := t.publishInfoLocked(true); err != nil {
		t.log.Warn("updating ros_discovery_info", "err", err)
	}
}

func (t *Transport) removeEntity(set map[dds.GUID]struct{}, g dds.GUID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := set[g]; !ok {
		return
	}
	delete(set, g)
	if t.closed || t.info == nil {
		return
	}
	if err := t.publishInfoLocked(true); err != nil {
		t.log.Warn("updating ros_discovery_info", "err", err)
	}
}

// Close publishes that the node left, then deletes the participant with
// every reader and writer; peers see them go.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.cancel()
	t.closeRosout()
	pp, fp := t.pp, t.fast
	var err error
	if t.info != nil {
		err = t.publishInfoLocked(false)
	}
	t.mu.Unlock()
	if fp != nil {
		if cerr := fp.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	if pp != nil {
		if cerr := pp.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}
