// Package ros1 is the node's ROS 1 transport: it implements node.Transport
// with goroslib (XML-RPC master and slave API, TCPROS). It finds the master
// from the ROS environment, waits for it, notices when a restarted master has
// forgotten the node and then registers everything again, and turns
// `rosnode kill` into Shutdown().
package ros1

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bluenviron/goroslib/v2"
	"github.com/bluenviron/goroslib/v2/pkg/apimaster"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_srvs"

	"github.com/lingbotmap/lingbotmap/node"
)

// Options configure a Transport.
type Options struct {
	// Env is the ROS environment and the node's name (see ParseROSEnv).
	Env ROSEnv
	// MasterCheckInterval is how often the transport asks the master whether
	// it still knows the node, to re-register after a master restart.
	// It defaults to one second.
	MasterCheckInterval time.Duration
	// Log defaults to slog.Default().
	Log *slog.Logger
}

// Transport is a ROS 1 node seen through node.Transport.
type Transport struct {
	env   ROSEnv
	log   *slog.Logger
	check time.Duration

	ctx    context.Context // ends at Close: releases service handlers and the watcher
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex // guards gn, endpoints, closed
	gn        *goroslib.Node
	endpoints []endpoint
	closed    bool

	relay *hostRelay // nil when goroslib can advertise Env.Host itself

	shutdown     chan struct{}
	shutdownOnce sync.Once
	reconnects   atomic.Int64
	lastWrite    atomic.Int64 // UnixNano of the last message handed to goroslib
}

// endpoint is a publisher, subscription or service that must exist on
// whichever goroslib node is current.
type endpoint interface {
	attach(gn *goroslib.Node) error
	detach()
}

var _ node.Transport = (*Transport)(nil)

// New prepares a transport; Connect joins the graph.
func New(opts Options) *Transport {
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	check := opts.MasterCheckInterval
	if check <= 0 {
		check = time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Transport{
		env:      opts.Env,
		log:      log,
		check:    check,
		ctx:      ctx,
		cancel:   cancel,
		shutdown: make(chan struct{}),
	}
}

// Connect registers with the master, retrying until it answers, ctx ends or
// the master asks the node to shut down.
func (t *Transport) Connect(ctx context.Context) error {
	relay, err := newHostRelay(t.env.Host, t.env.MasterAddress)
	if err != nil {
		return err
	}
	t.relay = relay
	gn, err := t.dial(ctx)
	if err != nil {
		if relay != nil {
			relay.Close()
		}
		return err
	}
	t.mu.Lock()
	t.gn = gn
	t.mu.Unlock()
	t.checkIntervalParam()
	t.wg.Add(1)
	go func() { defer t.wg.Done(); t.watchMaster() }()
	return nil
}

// checkIntervalParam applies the ~master_check_interval parameter, which
// the core reads only after Connect, when the watcher already needs it.
func (t *Transport) checkIntervalParam() {
	const key = "master_check_interval"
	p := params{t}
	if set, err := p.IsSet(key); err != nil || !set {
		return
	}
	s, err := p.Float64(key)
	if err != nil {
		i, ierr := p.Int(key)
		if ierr != nil {
			return // the core reports the bad value when it applies the parameters
		}
		s = float64(i)
	}
	if d := time.Duration(s * float64(time.Second)); d > 0 {
		t.check = d
	}
}

// dial creates a goroslib node, retrying until the master answers or ctx ends.
func (t *Transport) dial(ctx context.Context) (*goroslib.Node, error) {
	for attempt := 0; ; attempt++ {
		conf := goroslib.NodeConf{
			Name:            t.env.Name,
			Namespace:       t.env.Namespace,
			MasterAddress:   t.env.MasterAddress,
			Host:            t.env.Host,
			LogDestinations: goroslib.LogDestinationRosout | goroslib.LogDestinationCallback,
			OnLog:           t.onRosLog,
		}
		var err error
		if t.relay != nil {
			conf.MasterAddress, conf.Host = t.relay.masterAddr(), t.relay.ip
			conf.ApislavePort, err = t.relay.freePort()
			t.relay.route(conf.ApislavePort)
		}
		var gn *goroslib.Node
		if err == nil {
			gn, err = goroslib.NewNode(conf)
		}
		if err == nil {
			return gn, nil
		}
		if attempt%20 == 0 {
			t.log.Warn("cannot register with the ROS master; retrying", "master", t.env.MasterAddress, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("gave up reaching the ROS master at %s: %w", t.env.MasterAddress, ctx.Err())
		case <-t.shutdown:
			return nil, errors.New("shut down by the ROS master")
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// onRosLog forwards goroslib's log to slog and catches the shutdown request
// that `rosnode kill` (or a node taking our name) sends: goroslib v2.1.5
// cancels itself then but offers no other signal.
func (t *Transport) onRosLog(level goroslib.LogLevel, msg string) {
	if strings.HasPrefix(msg, "got shutdown request") {
		t.shutdownOnce.Do(func() { close(t.shutdown) })
	}
	// Errors included: goroslib reports routine events, such as a bag player
	// going away, as errors, so they stay at debug level here.
	t.log.Debug("goroslib", "level", int(level), "msg", msg)
}

// watchMaster asks the master every check interval whether it still knows
// this node. A restarted master has forgotten every registration and
// goroslib does not notice, so the transport then registers again and
// re-creates every endpoint on the new registration.
func (t *Transport) watchMaster() {
	client := apimaster.NewClient(t.env.MasterAddress, t.env.FullName(), &http.Client{Timeout: 2 * time.Second})
	tick := time.NewTicker(t.check)
	defer tick.Stop()
	lost := false
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-t.shutdown:
			return // goroslib unregistered on the master's request; stay away
		case <-tick.C:
		}
		if _, err := client.LookupNode(t.env.FullName()); err == nil {
			continue
		} else if !lost {
			lost = true
			t.log.Warn("the ROS master no longer knows this node (master restarted or unreachable); re-registering", "err", err)
		}
		t.detachAll()
		gn, err := t.dial(t.ctx)
		if err != nil {
			return
		}
		if err := t.attachAll(gn); err != nil {
			t.log.Warn("re-registering with the ROS master", "err", err)
			continue
		}
		t.reconnects.Add(1)
		lost = false
		t.log.Info("re-registered with the ROS master", "master", t.env.MasterAddress)
	}
}

// detachAll closes every endpoint's registration and the goroslib node.
func (t *Transport) detachAll() {
	t.mu.Lock()
	gn, eps := t.gn, append([]endpoint(nil), t.endpoints...)
	t.gn = nil
	t.mu.Unlock()
	for _, ep := range eps {
		ep.detach()
	}
	if gn != nil {
		gn.Close()
	}
}

// attachAll makes gn current and re-creates every endpoint on it; on error
// gn is closed again.
func (t *Transport) attachAll(gn *goroslib.Node) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		gn.Close()
		return errors.New("transport closed")
	}
	t.gn = gn
	eps := append([]endpoint(nil), t.endpoints...)
	t.mu.Unlock()
	for _, ep := range eps {
		if err := ep.attach(gn); err != nil {
			t.detachAll()
			return err
		}
	}
	return nil
}

// add records ep and attaches it to the current goroslib node, if any (a
// re-registration in progress attaches it later).
func (t *Transport) add(ep endpoint) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return errors.New("transport closed")
	}
	t.endpoints = append(t.endpoints, ep)
	gn := t.gn
	t.mu.Unlock()
	if gn == nil {
		return nil
	}
	if err := ep.attach(gn); err != nil {
		t.remove(ep)
		return err
	}
	return nil
}

func (t *Transport) remove(ep endpoint) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, e := range t.endpoints {
		if e == ep {
			t.endpoints = append(t.endpoints[:i], t.endpoints[i+1:]...)
			return
		}
	}
}

// FullName is the node's absolute name.
func (t *Transport) FullName() string { return t.env.FullName() }

// Resolve resolves name against the node's namespace and applies the remaps.
func (t *Transport) Resolve(name string) string { return t.env.Resolve(name) }

// Params reads the node's private parameters on the master.
func (t *Transport) Params() node.ParamSource { return params{t} }

// Shutdown is closed when the master asks the node to shut down.
func (t *Transport) Shutdown() <-chan struct{} { return t.shutdown }

// Stats reports the re-registrations after master restarts.
func (t *Transport) Stats() node.TransportStats {
	return node.TransportStats{Reconnects: t.reconnects.Load()}
}

// flushGrace is how long Close lets the last messages leave: goroslib drops
// what is still queued for a subscriber when a publisher closes.
const flushGrace = 200 * time.Millisecond

// Close unregisters everything and leaves the graph.
func (t *Transport) Close() error {
	t.cancel()
	t.wg.Wait()
	if d := flushGrace - time.Since(time.Unix(0, t.lastWrite.Load())); d > 0 {
		time.Sleep(d)
	}
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.detachAll()
	t.mu.Lock()
	t.endpoints = nil
	t.mu.Unlock()
	if t.relay != nil {
		t.relay.Close()
	}
	return nil
}

// current is the goroslib node, or an error while there is none.
func (t *Transport) current() (*goroslib.Node, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gn == nil {
		return nil, fmt.Errorf("not registered with the ROS master at %s", t.env.MasterAddress)
	}
	return t.gn, nil
}

// msgType checks that a TopicSpec's Type is a pointer to a message struct.
func msgType(v any) (reflect.Type, error) {
	typ := reflect.TypeOf(v)
	if typ == nil || typ.Kind() != reflect.Pointer || typ.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("message type %T is not a pointer to a message struct", v)
	}
	return typ, nil
}

// closer is what goroslib's publishers, subscribers and service providers
// have in common.
type closer interface {
	comparable
	Close()
}

// binding is an endpoint that holds one goroslib handle on whichever node is
// current: attach opens it (again after a master restart), detach closes it.
type binding[H closer] struct {
	t    *Transport
	open func(gn *goroslib.Node) (H, error) // called with mu held

	mu     sync.Mutex
	on     *goroslib.Node
	h      H // zero while detached
	closed bool
}

// bind sets b up to open its handle with open and adds it to t.
func bind[H closer](t *Transport, b *binding[H], open func(gn *goroslib.Node) (H, error)) error {
	b.t, b.open = t, open
	return t.add(b)
}

func (b *binding[H]) attach(gn *goroslib.Node) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.on == gn {
		return nil
	}
	h, err := b.open(gn)
	if err != nil {
		return err
	}
	b.on, b.h = gn, h
	return nil
}

func (b *binding[H]) detach() {
	var zero H
	b.mu.Lock()
	h := b.h
	b.on, b.h = nil, zero
	b.mu.Unlock()
	if h != zero {
		h.Close()
	}
}

// Close removes the endpoint for good.
func (b *binding[H]) Close() error {
	b.t.remove(b)
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.detach()
	return nil
}

// Advertise opens a publisher; latched roles keep their last message and
// send it again after a re-registration.
func (t *Transport) Advertise(spec node.TopicSpec) (node.Publisher, error) {
	typ, err := msgType(spec.Type)
	if err != nil {
		return nil, err
	}
	p := &publisher{spec: spec, typ: typ,
		latch: spec.Role == node.RoleLatched || spec.Role == node.RoleTFStatic}
	if err := bind(t, &p.binding, p.create); err != nil {
		return nil, err
	}
	return p, nil
}

type publisher struct {
	binding[*goroslib.Publisher]
	spec  node.TopicSpec
	typ   reflect.Type
	latch bool
	last  any // latched: the message a new registration starts with (guarded by mu)
}

// create opens the goroslib publisher and sends it the latched message.
func (p *publisher) create(gn *goroslib.Node) (*goroslib.Publisher, error) {
	gp, err := goroslib.NewPublisher(goroslib.PublisherConf{Node: gn, Topic: p.spec.Name, Msg: p.spec.Type, Latch: p.latch})
	if err != nil {
		return nil, fmt.Errorf("publisher %s: %w", p.spec.Name, err)
	}
	if p.last != nil {
		gp.Write(p.last)
	}
	return gp, nil
}

// Write sends msg, which must be of the topic's type; between a master
// restart and the re-registration only a latched topic keeps it.
func (p *publisher) Write(msg any) error {
	if reflect.TypeOf(msg) != p.typ {
		return fmt.Errorf("publisher %s: message of type %T, want %v", p.spec.Name, msg, p.typ)
	}
	if reflect.ValueOf(msg).IsNil() {
		return fmt.Errorf("publisher %s: nil message", p.spec.Name)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("publisher %s is closed", p.spec.Name)
	}
	if p.latch {
		p.last = msg
	}
	if p.h != nil {
		p.h.Write(msg)
		p.t.lastWrite.Store(time.Now().UnixNano())
	}
	return nil
}

// Subscribe calls handle with every message on spec.Name. goroslib decodes
// the ROS 1 wire format itself and drops a connection that sends bytes it
// cannot decode, so handle only ever gets messages here.
func (t *Transport) Subscribe(spec node.TopicSpec, handle func(msg any, err error)) (io.Closer, error) {
	typ, err := msgType(spec.Type)
	if err != nil {
		return nil, err
	}
	cb := reflect.MakeFunc(reflect.FuncOf([]reflect.Type{typ}, nil, false), func(args []reflect.Value) []reflect.Value {
		handle(args[0].Interface(), nil)
		return nil
	}).Interface()
	s := new(binding[*goroslib.Subscriber])
	err = bind(t, s, func(gn *goroslib.Node) (*goroslib.Subscriber, error) {
		// QueueSize 0 runs the callback on the connection's goroutine, so a
		// full frame queue (policy all) holds the sender back.
		gs, err := goroslib.NewSubscriber(goroslib.SubscriberConf{Node: gn, Topic: spec.Name, Callback: cb})
		if err != nil {
			return nil, fmt.Errorf("subscriber %s: %w", spec.Name, err)
		}
		return gs, nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// ServeTrigger offers a std_srvs/Trigger service.
func (t *Transport) ServeTrigger(name string, handle func(ctx context.Context) (string, error)) (io.Closer, error) {
	s := new(binding[*goroslib.ServiceProvider])
	err := bind(t, s, func(gn *goroslib.Node) (*goroslib.ServiceProvider, error) {
		sp, err := goroslib.NewServiceProvider(goroslib.ServiceProviderConf{
			Node: gn,
			Name: name,
			Srv:  &std_srvs.Trigger{},
			Callback: func(*std_srvs.TriggerReq) (*std_srvs.TriggerRes, bool) {
				msg, err := handle(t.ctx)
				if err != nil {
					return &std_srvs.TriggerRes{Success: false, Message: err.Error()}, true
				}
				return &std_srvs.TriggerRes{Success: true, Message: msg}, true
			},
		})
		if err != nil {
			return nil, fmt.Errorf("service %s: %w", name, err)
		}
		return sp, nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}
