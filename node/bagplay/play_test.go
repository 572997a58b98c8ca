package bagplay

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"
	"github.com/foxglove/mcap/go/mcap"

	"github.com/lingbotmap/lingbotmap/msgs"
	"github.com/lingbotmap/lingbotmap/msgs/cdr"
	"github.com/lingbotmap/lingbotmap/node"
)

// fakeTransport records what is advertised and published, and when.
type fakeTransport struct {
	mu     sync.Mutex
	specs  []node.TopicSpec
	times  []time.Time
	msgs   []any
	closed bool
	// onWrite is called after each published message, with their count.
	onWrite func(n int)
}

type fakePub struct{ t *fakeTransport }

func (p fakePub) Write(msg any) error {
	p.t.mu.Lock()
	defer p.t.mu.Unlock()
	p.t.times = append(p.t.times, time.Now())
	p.t.msgs = append(p.t.msgs, msg)
	if p.t.onWrite != nil {
		p.t.onWrite(len(p.t.msgs))
	}
	return nil
}
func (p fakePub) Close() error { p.t.closed = true; return nil }

func (t *fakeTransport) Connect(context.Context) error { return nil }
func (t *fakeTransport) FullName() string              { return "/player" }
func (t *fakeTransport) Resolve(name string) string    { return "/remapped" + name }
func (t *fakeTransport) Params() node.ParamSource      { return nil }
func (t *fakeTransport) Advertise(s node.TopicSpec) (node.Publisher, error) {
	t.specs = append(t.specs, s)
	return fakePub{t}, nil
}
func (t *fakeTransport) Subscribe(node.TopicSpec, func(any, error)) (io.Closer, error) {
	return nil, errors.New("not used")
}
func (t *fakeTransport) ServeTrigger(string, func(context.Context) (string, error)) (io.Closer, error) {
	return nil, errors.New("not used")
}
func (t *fakeTransport) Shutdown() <-chan struct{}  { return nil }
func (t *fakeTransport) Stats() node.TransportStats { return node.TransportStats{} }
func (t *fakeTransport) Close() error               { return nil }

// logOffsets are the recorded times of the camera messages, in ms; the
// message at 150 ms is cut short and must be skipped, not published.
var logOffsets = []int{0, 100, 150, 400}

const cutAt = 150

func stampOf(ms int) time.Time { return time.Unix(1600000000, int64(ms)*1_000_000) }

// writeBag writes the camera topic (with qos as its offered QoS) and a pose
// topic with the mcap library, so that one message can be corrupt.
func writeBag(t *testing.T, qos string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cam.mcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := mcap.NewWriter(f, &mcap.WriterOptions{Chunked: true, ChunkSize: 1 << 20})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(err)
	must(w.WriteHeader(&mcap.Header{Profile: "ros2"}))
	img, _ := cdr.TypeOf(&sensor_msgs.Image{})
	pose, _ := cdr.TypeOf(&geometry_msgs.PoseStamped{})
	must(w.WriteSchema(&mcap.Schema{ID: 1, Name: img.Name, Encoding: "ros2msg", Data: []byte(img.Schema)}))
	must(w.WriteSchema(&mcap.Schema{ID: 2, Name: pose.Name, Encoding: "ros2msg", Data: []byte(pose.Schema)}))
	must(w.WriteChannel(&mcap.Channel{ID: 1, SchemaID: 1, Topic: "/camera/image_raw", MessageEncoding: "cdr",
		Metadata: map[string]string{"offered_qos_profiles": qos}}))
	must(w.WriteChannel(&mcap.Channel{ID: 2, SchemaID: 2, Topic: "/pose", MessageEncoding: "cdr"}))
	base := time.Unix(1700000000, 0)
	for i, ms := range logOffsets {
		data, err := cdr.Marshal(&sensor_msgs.Image{Header: std_msgs.Header{Stamp: stampOf(ms), FrameId: "cam"},
			Width: 1, Height: 1, Encoding: "mono8", Step: 1, Data: []byte{uint8(i)}})
		must(err)
		if ms == cutAt {
			data = data[:len(data)-3]
		}
		at := uint64(base.Add(time.Duration(ms) * time.Millisecond).UnixNano())
		must(w.WriteMessage(&mcap.Message{ChannelID: 1, Sequence: uint32(i), LogTime: at, PublishTime: at, Data: data}))
		data, err = cdr.Marshal(&geometry_msgs.PoseStamped{})
		must(err)
		must(w.WriteMessage(&mcap.Message{ChannelID: 2, LogTime: at + 1, PublishTime: at + 1, Data: data}))
	}
	must(w.Close())
	must(f.Close())
	return path
}

// The camera topic is published on its resolved name with its stamps, at the
// recorded pace; the corrupt message is counted and left out.
func TestPlay(t *testing.T) {
	path := writeBag(t, "- history: 1\n  depth: 5\n  reliability: 2\n  durability: 2\n")
	tr := &fakeTransport{}
	o := DefaultOptions()
	o.Delay = 10 * time.Millisecond
	start := time.Now()
	res, err := Play(context.Background(), path, tr, o)
	if err != nil {
		t.Fatal(err)
	}
	var de *msgs.DecodeError
	if res.Topic != "/camera/image_raw" || res.Published != 3 || res.Skipped != 1 || !errors.As(res.FirstErr, &de) {
		t.Fatalf("result %+v", res)
	}
	if len(tr.specs) != 1 || tr.specs[0].Name != "/remapped/camera/image_raw" || tr.specs[0].Role != node.RoleSensor || !tr.closed {
		t.Fatalf("advertised %+v (closed %v)", tr.specs, tr.closed)
	}
	if _, ok := tr.specs[0].Type.(*sensor_msgs.Image); !ok {
		t.Fatalf("advertised type %T", tr.specs[0].Type)
	}
	var wantMS []int
	for _, ms := range logOffsets {
		if ms != cutAt {
			wantMS = append(wantMS, ms)
		}
	}
	t0 := tr.times[0]
	if t0.Sub(start) < o.Delay {
		t.Errorf("first message after %v, before the %v delay", t0.Sub(start), o.Delay)
	}
	for i, ms := range wantMS {
		im := tr.msgs[i].(*sensor_msgs.Image)
		if !im.Header.Stamp.Equal(stampOf(ms)) {
			t.Errorf("message %d stamped %v, want %v", i, im.Header.Stamp, stampOf(ms))
		}
		// Never early; late by at most a loaded machine's scheduling delay.
		got, want := tr.times[i].Sub(t0), time.Duration(ms)*time.Millisecond
		if got < want-time.Millisecond || got > want+150*time.Millisecond {
			t.Errorf("message %d published %v after the first, want %v", i, got, want)
		}
	}

	// Twice the rate halves the gaps; reliable recorded QoS gives a reliable publisher.
	tr = &fakeTransport{}
	o.Rate = 2
	path = writeBag(t, "- history: keep_last\n  depth: 10\n  reliability: reliable\n")
	if _, err := Play(context.Background(), path, tr, o); err != nil {
		t.Fatal(err)
	}
	if got := tr.times[2].Sub(tr.times[0]); got < 199*time.Millisecond || got > 350*time.Millisecond {
		t.Errorf("at rate 2 the last message came %v after the first, want 200ms", got)
	}
	if tr.specs[0].Role != node.RoleOutput {
		t.Errorf("role %v for a reliable recording", tr.specs[0].Role)
	}
}

func TestPlayStops(t *testing.T) {
	path := writeBag(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	tr := &fakeTransport{onWrite: func(int) { cancel() }}
	o := DefaultOptions()
	o.Delay = 0
	res, err := Play(ctx, path, tr, o)
	if !errors.Is(err, context.Canceled) || res.Published != 1 {
		t.Fatalf("cancelled replay: %+v, %v", res, err)
	}
}

func TestPlayErrors(t *testing.T) {
	path := writeBag(t, "")
	for _, c := range []struct {
		o    func(*Options)
		want string
	}{
		{func(o *Options) { o.Topic = "/pose" }, `no image topic "/pose"`},
		{func(o *Options) { o.Rate = 0 }, "'rate'"},
		{func(o *Options) { o.Delay = -time.Second }, "'delay'"},
	} {
		o := DefaultOptions()
		c.o(&o)
		if _, err := Play(context.Background(), path, &fakeTransport{}, o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
	if _, err := Play(context.Background(), filepath.Join(t.TempDir(), "none.mcap"), &fakeTransport{}, DefaultOptions()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing bag: %v", err)
	}
}

func TestBestEffort(t *testing.T) {
	for qos, want := range map[string]bool{
		"- reliability: 2\n":                   true,
		"- reliability: best_effort\n":         true,
		"- reliability: 1\n":                   false,
		"- reliability: 2\n- reliability: 1\n": false,
		"":                                     false,
		"not: [yaml":                           false,
		"- history: 3\n  depth: 0\n  reliability: 2\n": true,
	} {
		if got := bestEffort(qos); got != want {
			t.Errorf("bestEffort(%q) = %v", qos, got)
		}
	}
}
