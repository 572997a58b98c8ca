package ros1

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/apimaster"
	"github.com/bluenviron/goroslib/v2/pkg/apislave"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"

	"github.com/lingbotmap/lingbotmap/node"
	"github.com/lingbotmap/lingbotmap/node/ros1/rostest"
)

// envOf reads a variable from an environment list, last entry winning.
func envOf(env []string, extra ...string) func(string) string {
	all := append(append([]string(nil), env...), extra...)
	return func(k string) string {
		v := ""
		for _, e := range all {
			if name, val, ok := strings.Cut(e, "="); ok && name == k {
				v = val
			}
		}
		return v
	}
}

// connect runs a transport from the ROS environment env with a latched
// topic and a service, and closes it when the test ends.
func connect(t *testing.T, getenv func(string) string, name string) *Transport {
	t.Helper()
	env, _, err := ParseROSEnv([]string{"__name:=" + name}, getenv, "lingbotmap")
	if err != nil {
		t.Fatal(err)
	}
	tr := New(Options{Env: env})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := tr.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	pub, err := tr.Advertise(node.TopicSpec{Name: tr.Resolve("~status"), Type: &std_msgs.String{}, Role: node.RoleLatched})
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Write(&std_msgs.String{Data: "advertised as " + getenv("ROS_HOSTNAME") + getenv("ROS_IP")}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.ServeTrigger(tr.Resolve("~ping"), func(context.Context) (string, error) { return "pong", nil }); err != nil {
		t.Fatal(err)
	}
	return tr
}

// Issue #17: with ROS_HOSTNAME=localhost the node registered its URIs with
// 127.0.0.1, because goroslib resolves its Host to an address. The master,
// rosnode, rosservice and the node's own requestTopic answer must give the
// name, the tools must reach the node through it, and unregistering must
// still match the registration.
func TestAdvertisesROSHostname(t *testing.T) {
	m := rostest.StartMaster(t)
	getenv := envOf(m.Env)
	if getenv("ROS_HOSTNAME") != "localhost" {
		t.Fatalf("the test master's environment has ROS_HOSTNAME=%q", getenv("ROS_HOSTNAME"))
	}
	tr := connect(t, getenv, "named")
	client := apimaster.NewClient(m.Addr, "/asker", &http.Client{Timeout: 5 * time.Second})
	uri, err := client.LookupNode("/named")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(uri, "http://localhost:") {
		t.Fatalf("the master's lookupNode /named = %q, want http://localhost:PORT/", uri)
	}
	// A subscriber asks the node's slave API where to connect for a topic.
	slave := apislave.NewClient(strings.TrimSuffix(strings.TrimPrefix(uri, "http://"), "/"), "/asker", &http.Client{Timeout: 5 * time.Second})
	proto, err := slave.RequestTopic("/named/status", [][]interface{}{{"TCPROS"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(proto) != 3 || proto[0] != "TCPROS" || proto[1] != "localhost" {
		t.Fatalf("requestTopic /named/status answered %v, want TCPROS localhost PORT", proto)
	}
	if out := m.Run(t, 20*time.Second, "rosnode", "info", "/named"); !strings.Contains(out, "contacting node "+uri) || !strings.Contains(out, "/named/status") {
		t.Fatalf("rosnode info /named:\n%s", out)
	}
	if out := m.Run(t, 20*time.Second, "rosservice", "uri", "/named/ping"); !strings.HasPrefix(strings.TrimSpace(out), "rosrpc://localhost:") {
		t.Fatalf("rosservice uri /named/ping = %q, want rosrpc://localhost:PORT", out)
	}
	if out := m.Run(t, 20*time.Second, "rosservice", "call", "/named/ping"); !strings.Contains(out, "pong") {
		t.Fatalf("rosservice call /named/ping:\n%s", out)
	}
	if out := m.Run(t, 20*time.Second, "rostopic", "echo", "-n", "1", "/named/status"); !strings.Contains(out, "advertised as localhost") {
		t.Fatalf("rostopic echo /named/status:\n%s", out)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if m.Knows("/named") {
		t.Error("the master still knows /named after Close: unregistering did not match the registered URI")
	}
}

// ROS_IP is an address, advertised as given; ROS_HOSTNAME wins over it as in
// roscpp and rospy.
func TestAdvertisesROSIP(t *testing.T) {
	m := rostest.StartMaster(t)
	connect(t, envOf(m.Env, "ROS_HOSTNAME=", "ROS_IP=127.0.0.1"), "byip")
	client := apimaster.NewClient(m.Addr, "/asker", &http.Client{Timeout: 5 * time.Second})
	if uri, err := client.LookupNode("/byip"); err != nil || !strings.HasPrefix(uri, "http://127.0.0.1:") {
		t.Fatalf("lookupNode /byip = %q, %v; want http://127.0.0.1:PORT/", uri, err)
	}
	e, _, err := ParseROSEnv(nil, envOf(nil, "ROS_HOSTNAME=localhost", "ROS_IP=127.0.0.1"), "x")
	if err != nil || e.Host != "localhost" {
		t.Fatalf("ROS_HOSTNAME and ROS_IP both set: host %q, %v; want localhost", e.Host, err)
	}
}

// A host name that does not resolve stops Connect with a message naming it.
func TestUnresolvableHostname(t *testing.T) {
	tr := New(Options{Env: ROSEnv{MasterAddress: "127.0.0.1:1", Host: "no-such-host.invalid", Namespace: "/", Name: "x"}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := tr.Connect(ctx)
	if err == nil || !strings.Contains(err.Error(), "no-such-host.invalid") || !strings.Contains(err.Error(), "ROS_HOSTNAME") {
		t.Fatalf("Connect with an unresolvable host: %v", err)
	}
}
