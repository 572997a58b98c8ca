// Package nodetest is an in-memory node.Transport for testing the node core
// without any middleware: a test delivers messages to the node's
// subscriptions, calls its services, sets its parameters, asks it to shut
// down, and reads back every message it published, in order.
package nodetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/lingbotmap/lingbotmap/node"
)

// Transport is the test double. Its zero value is not usable; call New.
type Transport struct {
	name   string
	remaps map[string]string

	mu         sync.Mutex
	connectErr error
	connected  bool
	closed     bool
	params     map[string]any
	topics     map[string]*topic
	subs       map[string]*sub
	services   map[string]func(context.Context) (string, error)
	reconnects int64
	ctx        context.Context // ends at Close: service calls get it
	cancel     context.CancelFunc

	shutdown     chan struct{}
	shutdownOnce sync.Once
}

type topic struct {
	spec   node.TopicSpec
	msgs   []any
	closed bool
}

type sub struct {
	spec   node.TopicSpec
	handle func(any, error)
}

var _ node.Transport = (*Transport)(nil)

// New makes a transport for a node named fullName ("/lbm"); remaps maps
// resolved names to the names they stand for, as ROS remapping does.
func New(fullName string, remaps map[string]string) *Transport {
	ctx, cancel := context.WithCancel(context.Background())
	return &Transport{
		name:     fullName,
		remaps:   remaps,
		params:   map[string]any{},
		topics:   map[string]*topic{},
		subs:     map[string]*sub{},
		services: map[string]func(context.Context) (string, error){},
		ctx:      ctx,
		cancel:   cancel,
		shutdown: make(chan struct{}),
	}
}

// FailConnect makes Connect fail with err.
func (t *Transport) FailConnect(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.connectErr = err
}

// SetParam sets a parameter by configuration key ("queue_policy",
// "engine.weights"); v is a bool, int, float64 or string.
func (t *Transport) SetParam(key string, v any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.params[key] = v
}

// SetReconnects sets what Stats reports.
func (t *Transport) SetReconnects(n int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reconnects = n
}

// RequestShutdown closes Shutdown(), as `rosnode kill` does.
func (t *Transport) RequestShutdown() { t.shutdownOnce.Do(func() { close(t.shutdown) }) }

// Connect implements node.Transport.
func (t *Transport) Connect(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.connectErr != nil {
		return t.connectErr
	}
	if t.connected {
		return errors.New("nodetest: Connect called twice")
	}
	t.connected = true
	return nil
}

// FullName implements node.Transport.
func (t *Transport) FullName() string { return t.name }

// Resolve implements node.Transport: "/a" stays, "~a" is under the node's
// name, "a" is in the node's namespace; then the remaps apply.
func (t *Transport) Resolve(name string) string {
	var r string
	switch {
	case strings.HasPrefix(name, "/"):
		r = name
	case strings.HasPrefix(name, "~"):
		r = path.Join(t.name, strings.TrimPrefix(name, "~"))
	default:
		r = path.Join(path.Dir(t.name), name)
	}
	if to, ok := t.remaps[r]; ok {
		return to
	}
	return r
}

// Params implements node.Transport.
func (t *Transport) Params() node.ParamSource { return params{t} }

// Advertise implements node.Transport.
func (t *Transport) Advertise(spec node.TopicSpec) (node.Publisher, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.usable(); err != nil {
		return nil, err
	}
	if !strings.HasPrefix(spec.Name, "/") {
		return nil, fmt.Errorf("nodetest: topic %q is not absolute", spec.Name)
	}
	if tp, ok := t.topics[spec.Name]; ok && !tp.closed {
		return nil, fmt.Errorf("nodetest: %s advertised twice", spec.Name)
	}
	tp := &topic{spec: spec}
	t.topics[spec.Name] = tp
	return &publisher{t: t, tp: tp}, nil
}

// usable says why the transport cannot open anything now.
func (t *Transport) usable() error {
	if !t.connected {
		return errors.New("nodetest: used before Connect")
	}
	if t.closed {
		return errors.New("nodetest: transport closed")
	}
	return nil
}

type publisher struct {
	t  *Transport
	tp *topic
}

// Write records msg; like a real transport it refuses another type.
func (p *publisher) Write(msg any) error {
	if reflect.TypeOf(msg) != reflect.TypeOf(p.tp.spec.Type) {
		return fmt.Errorf("nodetest: %s carries %T, not %T", p.tp.spec.Name, p.tp.spec.Type, msg)
	}
	p.t.mu.Lock()
	defer p.t.mu.Unlock()
	if p.tp.closed || p.t.closed {
		return fmt.Errorf("nodetest: %s is closed", p.tp.spec.Name)
	}
	p.tp.msgs = append(p.tp.msgs, msg)
	return nil
}

func (p *publisher) Close() error {
	p.t.mu.Lock()
	defer p.t.mu.Unlock()
	p.tp.closed = true
	return nil
}

// Subscribe implements node.Transport.
func (t *Transport) Subscribe(spec node.TopicSpec, handle func(msg any, err error)) (io.Closer, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.usable(); err != nil {
		return nil, err
	}
	if _, ok := t.subs[spec.Name]; ok {
		return nil, fmt.Errorf("nodetest: %s subscribed twice", spec.Name)
	}
	s := &sub{spec: spec, handle: handle}
	t.subs[spec.Name] = s
	return closer(func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.subs[spec.Name] == s {
			delete(t.subs, spec.Name)
		}
	}), nil
}

// ServeTrigger implements node.Transport.
func (t *Transport) ServeTrigger(name string, handle func(ctx context.Context) (string, error)) (io.Closer, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.usable(); err != nil {
		return nil, err
	}
	if _, ok := t.services[name]; ok {
		return nil, fmt.Errorf("nodetest: service %s offered twice", name)
	}
	t.services[name] = handle
	return closer(func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		delete(t.services, name)
	}), nil
}

type closer func()

func (c closer) Close() error { c(); return nil }

// Shutdown implements node.Transport.
func (t *Transport) Shutdown() <-chan struct{} { return t.shutdown }

// Stats implements node.Transport.
func (t *Transport) Stats() node.TransportStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return node.TransportStats{Reconnects: t.reconnects}
}

// Close implements node.Transport.
func (t *Transport) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	t.cancel()
	t.subs = map[string]*sub{}
	t.services = map[string]func(context.Context) (string, error){}
	return nil
}

// Closed says whether Close was called.
func (t *Transport) Closed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// Subscribed says whether the node subscribes to name now.
func (t *Transport) Subscribed(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.subs[name]
	return ok
}

// Deliver hands msg (or a decoding failure err) to the node's subscription
// on name and returns when the node's handler does; it may block, as a
// real transport's callback does when the node's queue is full.
func (t *Transport) Deliver(name string, msg any, err error) error {
	t.mu.Lock()
	s, ok := t.subs[name]
	t.mu.Unlock()
	if !ok {
		return fmt.Errorf("nodetest: nobody subscribes to %s", name)
	}
	if msg != nil && reflect.TypeOf(msg) != reflect.TypeOf(s.spec.Type) {
		return fmt.Errorf("nodetest: %s carries %T, not %T", name, s.spec.Type, msg)
	}
	s.handle(msg, err)
	return nil
}

// callWait is how long Call waits for the service to be offered.
const callWait = 5 * time.Second

// Call calls the service name as a client would: like `ros2 service call`
// or rospy's wait_for_service before a call, it first waits for the service
// (a node offers its services a moment after it subscribes to its inputs),
// up to callWait.
func (t *Transport) Call(name string) (string, error) {
	for deadline := time.Now().Add(callWait); ; time.Sleep(2 * time.Millisecond) {
		t.mu.Lock()
		h, ok := t.services[name]
		ctx := t.ctx
		t.mu.Unlock()
		if ok {
			return h(ctx)
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("nodetest: no service %s within %v", name, callWait)
		}
	}
}

// Messages are the messages written on name so far, oldest first.
func (t *Transport) Messages(name string) []any {
	t.mu.Lock()
	defer t.mu.Unlock()
	tp, ok := t.topics[name]
	if !ok {
		return nil
	}
	return append([]any(nil), tp.msgs...)
}

// Last is the newest message written on name, or nil.
func (t *Transport) Last(name string) any {
	m := t.Messages(name)
	if len(m) == 0 {
		return nil
	}
	return m[len(m)-1]
}

// Spec is how name was advertised.
func (t *Transport) Spec(name string) (node.TopicSpec, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tp, ok := t.topics[name]
	if !ok {
		return node.TopicSpec{}, false
	}
	return tp.spec, true
}

// SubscriptionSpec is how the node subscribed to name.
func (t *Transport) SubscriptionSpec(name string) (node.TopicSpec, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.subs[name]
	if !ok {
		return node.TopicSpec{}, false
	}
	return s.spec, true
}

// params reads SetParam's values; a value of another type is an error, as
// the ROS parameter server gives.
type params struct{ t *Transport }

func (p params) value(key string) (any, error) {
	p.t.mu.Lock()
	defer p.t.mu.Unlock()
	v, ok := p.t.params[key]
	if !ok {
		return nil, fmt.Errorf("nodetest: parameter %s is not set", key)
	}
	return v, nil
}

func (p params) IsSet(key string) (bool, error) {
	p.t.mu.Lock()
	defer p.t.mu.Unlock()
	_, ok := p.t.params[key]
	return ok, nil
}

func typed[T any](p params, key string) (T, error) {
	var zero T
	v, err := p.value(key)
	if err != nil {
		return zero, err
	}
	x, ok := v.(T)
	if !ok {
		return zero, fmt.Errorf("nodetest: parameter %s is a %T, not a %T", key, v, zero)
	}
	return x, nil
}

func (p params) Bool(key string) (bool, error)       { return typed[bool](p, key) }
func (p params) Int(key string) (int, error)         { return typed[int](p, key) }
func (p params) Float64(key string) (float64, error) { return typed[float64](p, key) }
func (p params) String(key string) (string, error)   { return typed[string](p, key) }
