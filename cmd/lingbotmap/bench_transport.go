package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"sync"
	"time"

	"github.com/lingbotmap/lingbotmap/node"
	"github.com/lingbotmap/lingbotmap/node/ros1"
)

// benchTransport is the middleware under `bench --pipeline`: no middleware.
// The bench hands messages straight to the node's subscription callbacks,
// as a transport's receive thread would, and every message the node
// publishes is counted and let go (a run of hours must not keep them); the
// newest of each topic is kept for the bench to read (/diagnostics).
type benchTransport struct {
	name string

	mu     sync.Mutex
	subs   map[string]func(any, error)
	counts map[string]int64
	last   map[string]any
	lastAt map[string]time.Time
}

var _ node.Transport = (*benchTransport)(nil)

func newBenchTransport(name string) *benchTransport {
	return &benchTransport{name: name, subs: map[string]func(any, error){},
		counts: map[string]int64{}, last: map[string]any{}, lastAt: map[string]time.Time{}}
}

func (t *benchTransport) Connect(context.Context) error { return nil }
func (t *benchTransport) FullName() string              { return t.name }

// Resolve names as ROS 1 does for a node of this name, without remaps.
func (t *benchTransport) Resolve(name string) string {
	return ros1.ROSEnv{Namespace: path.Dir(t.name), Name: path.Base(t.name)}.Resolve(name)
}

func (t *benchTransport) Params() node.ParamSource { return noParams{} }

func (t *benchTransport) Advertise(spec node.TopicSpec) (node.Publisher, error) {
	return benchPublisher{t: t, name: spec.Name}, nil
}

func (t *benchTransport) Subscribe(spec node.TopicSpec, handle func(msg any, err error)) (io.Closer, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.subs[spec.Name]; ok {
		return nil, fmt.Errorf("bench: %s subscribed twice", spec.Name)
	}
	t.subs[spec.Name] = handle
	return closerFunc(func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		delete(t.subs, spec.Name)
	}), nil
}

func (t *benchTransport) ServeTrigger(string, func(context.Context) (string, error)) (io.Closer, error) {
	return closerFunc(func() {}), nil
}

func (t *benchTransport) Shutdown() <-chan struct{}  { return nil }
func (t *benchTransport) Stats() node.TransportStats { return node.TransportStats{} }
func (t *benchTransport) Close() error               { return nil }

// subscribed says whether the node listens on name.
func (t *benchTransport) subscribed(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.subs[name]
	return ok
}

// deliver calls the node's callback for name with msg; it may block (policy
// all holds the sender back).
func (t *benchTransport) deliver(name string, msg any) error {
	t.mu.Lock()
	h, ok := t.subs[name]
	t.mu.Unlock()
	if !ok {
		return fmt.Errorf("bench: the node does not subscribe to %s", name)
	}
	h(msg, nil)
	return nil
}

// newest is the last message on name and when it was written.
func (t *benchTransport) newest(name string) (any, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last[name], t.lastAt[name]
}

// count is how many messages were written on name.
func (t *benchTransport) count(name string) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts[name]
}

type benchPublisher struct {
	t    *benchTransport
	name string
}

func (p benchPublisher) Write(msg any) error {
	p.t.mu.Lock()
	defer p.t.mu.Unlock()
	p.t.counts[p.name]++
	p.t.last[p.name] = msg
	p.t.lastAt[p.name] = time.Now()
	return nil
}

func (p benchPublisher) Close() error { return nil }

type closerFunc func()

func (c closerFunc) Close() error { c(); return nil }

// noParams is a parameter server with nothing set.
type noParams struct{}

var errNoParam = errors.New("bench: no parameters")

func (noParams) IsSet(string) (bool, error)      { return false, nil }
func (noParams) Bool(string) (bool, error)       { return false, errNoParam }
func (noParams) Int(string) (int, error)         { return 0, errNoParam }
func (noParams) Float64(string) (float64, error) { return 0, errNoParam }
func (noParams) String(string) (string, error)   { return "", errNoParam }
