package ros1

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"

	"github.com/lingbotmap/lingbotmap/node"
	"github.com/lingbotmap/lingbotmap/node/ros1/rostest"
)

// The transport on its own, against rosmaster and the ROS tools: after the
// master restarts it registers again with every publisher, subscription and
// service, a latched topic gives its last message to a new subscriber,
// parameters are read by configuration key, and rosnode kill closes
// Shutdown().
func TestTransportSurvivesMasterRestart(t *testing.T) {
	m := rostest.StartMaster(t)
	m.Run(t, 20*time.Second, "rosparam", "set", "/tt/engine/device", "cuda")
	tr := New(Options{Env: ROSEnv{MasterAddress: m.Addr, Host: "localhost", Namespace: "/", Name: "tt", Remaps: map[string]string{}},
		MasterCheckInterval: 100 * time.Millisecond, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := tr.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	if v, err := tr.Params().String("engine.device"); err != nil || v != "cuda" {
		t.Fatalf("parameter engine.device = %q, %v; want the ~engine/device value cuda", v, err)
	}
	if set, err := tr.Params().IsSet("queue_policy"); err != nil || set {
		t.Fatalf("queue_policy IsSet = %v, %v", set, err)
	}

	latched, err := tr.Advertise(node.TopicSpec{Name: "/tt/state", Type: &std_msgs.String{}, Role: node.RoleLatched})
	if err != nil {
		t.Fatal(err)
	}
	if err := latched.Write(&std_msgs.Int32{Data: 1}); err == nil {
		t.Error("a message of another type was accepted")
	}
	if err := latched.Write(&std_msgs.String{Data: "before the restart"}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	sub, err := tr.Subscribe(node.TopicSpec{Name: "/tt/in", Type: &std_msgs.String{}, Role: node.RoleSensor}, func(msg any, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			got = append(got, "error: "+err.Error())
			return
		}
		got = append(got, msg.(*std_msgs.String).Data)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	calls := 0
	if _, err := tr.ServeTrigger("/tt/poke", func(context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return "poked", nil
	}); err != nil {
		t.Fatal(err)
	}

	m.Stop()
	time.Sleep(300 * time.Millisecond)
	m.Start()
	waitFor(t, "the transport to re-register", 20*time.Second, func() bool { return tr.Stats().Reconnects == 1 && m.Knows("/tt") })
	m.WaitSubscribed(t, "/tt/in", "/tt", 10*time.Second)

	if out := m.Run(t, 20*time.Second, "rostopic", "echo", "-n", "1", "/tt/state"); !strings.Contains(out, "before the restart") {
		t.Fatalf("the latched message was not sent again after the restart; rostopic echo printed:\n%s", out)
	}
	if out := m.Run(t, 20*time.Second, "rosservice", "call", "/tt/poke"); !strings.Contains(out, "poked") {
		t.Fatalf("rosservice call /tt/poke after the restart:\n%s", out)
	}
	gn, err := goroslib.NewNode(goroslib.NodeConf{Name: "tt_talker", MasterAddress: m.Addr, Host: "127.0.0.1",
		LogDestinations: goroslib.LogDestinationCallback})
	if err != nil {
		t.Fatal(err)
	}
	defer gn.Close()
	talker, err := goroslib.NewPublisher(goroslib.PublisherConf{Node: gn, Topic: "/tt/in", Msg: &std_msgs.String{}})
	if err != nil {
		t.Fatal(err)
	}
	defer talker.Close()
	waitFor(t, "a message through the re-created subscription", 10*time.Second, func() bool {
		talker.Write(&std_msgs.String{Data: "after the restart"})
		mu.Lock()
		defer mu.Unlock()
		return len(got) > 0
	})
	mu.Lock()
	if got[0] != "after the restart" || calls != 1 {
		t.Errorf("received %q and %d service calls", got, calls)
	}
	mu.Unlock()

	select {
	case <-tr.Shutdown():
		t.Fatal("Shutdown closed before any request")
	default:
	}
	if out := m.Run(t, 20*time.Second, "rosnode", "kill", "/tt"); !strings.Contains(out, "killed") {
		t.Fatalf("rosnode kill /tt:\n%s", out)
	}
	select {
	case <-tr.Shutdown():
	case <-time.After(10 * time.Second):
		t.Fatal("rosnode kill did not close Shutdown()")
	}
	time.Sleep(500 * time.Millisecond) // five master checks
	if m.Knows("/tt") || tr.Stats().Reconnects != 1 {
		t.Error("the transport registered again after rosnode kill")
	}
}
