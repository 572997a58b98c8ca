//go:build ros2

package ros2

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/internal/syncbuf"
	"github.com/lingbotmap/lingbotmap/msgs/cdr"
	"github.com/lingbotmap/lingbotmap/node/ros2/dds"
)

// The Gid size follows ROS_DISTRO; the setting and then the -p parameter
// override it; anything but 0, 16 and 24 is refused.
func TestGidSizeChoice(t *testing.T) {
	for _, c := range []struct {
		distro  string
		setting int
		rosArgs []string
		want    int
		from    string
	}{
		{"humble", 0, nil, 24, "ROS_DISTRO=humble"},
		{"iron", 0, nil, 16, "ROS_DISTRO=iron"},
		{"jazzy", 0, nil, 16, "ROS_DISTRO=jazzy"},
		{"kilted", 0, nil, 16, "ROS_DISTRO=kilted"},
		{"rolling", 0, nil, 16, "ROS_DISTRO=rolling"},
		{"zephyr", 0, nil, 16, "ROS_DISTRO=zephyr"},
		{"", 0, nil, 16, "ROS_DISTRO unset"},
		{"jazzy", 24, nil, 24, "ros2_gid_size setting"},
		{"humble", 16, nil, 16, "ros2_gid_size setting"},
		{"jazzy", 16, []string{"-p", "ros2_gid_size:=24"}, 24, "ros2_gid_size parameter"},
	} {
		a, _, err := ParseArgs(append([]string{"--ros-args"}, c.rosArgs...), func(k string) string {
			if k == "ROS_DISTRO" {
				return c.distro
			}
			return ""
		}, "lingbotmap")
		if err != nil {
			t.Fatal(err)
		}
		a.GidSize = c.setting
		tr := &Transport{args: a}
		got, from, err := tr.gidSize()
		if err != nil || got != c.want || !strings.HasPrefix(from, c.from) {
			t.Errorf("distro %q setting %d args %q: %d (%q), %v; want %d (%q)", c.distro, c.setting, c.rosArgs, got, from, err, c.want, c.from)
		}
	}
	for _, bad := range []int{8, 20, -1} {
		tr := &Transport{args: Args{GidSize: bad}}
		if _, _, err := tr.gidSize(); err == nil || !strings.Contains(err.Error(), "want 0") {
			t.Errorf("Gid size %d: %v", bad, err)
		}
	}
}

func loggedTransport(t *testing.T, distro, name string) (*Transport, *syncbuf.Buffer) {
	t.Helper()
	a, _, err := ParseArgs([]string{"--ros-args", "-r", "__node:=" + name}, func(k string) string {
		if k == "ROS_DISTRO" {
			return distro
		}
		return ""
	}, "lingbotmap")
	if err != nil {
		t.Fatal(err)
	}
	l := &syncbuf.Buffer{}
	tr, err := New(a, slog.New(slog.NewTextHandler(l, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr, l
}

// waitStats waits until cond holds for tr's counters.
func waitStats(t *testing.T, what string, tr *Transport, cond func(gid, bad int64) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := tr.Stats()
		if cond(s.GidMismatchedPeers, s.GraphUnreadable) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: counters %+v after 20 s", what, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A Jazzy node and a Humble node in one domain: each decodes the other's
// ros_discovery_info, logs once which sizes differ and counts the peer; a
// sample neither layout reads is counted and logged, and nothing stops.
func TestGidSizeMismatchedPeers(t *testing.T) {
	jazzy, jazzyLog := loggedTransport(t, "jazzy", "new")
	humble, humbleLog := loggedTransport(t, "humble", "old")
	for _, c := range []struct {
		tr  *Transport
		log *syncbuf.Buffer
		own int
	}{{jazzy, jazzyLog, 16}, {humble, humbleLog, 24}} {
		waitStats(t, "mismatched peer", c.tr, func(gid, _ int64) bool { return gid == 1 })
		logged := c.log.String()
		if !strings.Contains(logged, "gid_bytes="+map[int]string{16: "16", 24: "24"}[c.own]) {
			t.Errorf("no log line names the Gid size %d:\n%s", c.own, logged)
		}
		other := map[int]string{16: "24", 24: "16"}[c.own]
		if !strings.Contains(logged, "peer_gid_bytes="+other) || strings.Count(logged, "other Gids than this node") != 1 || !strings.Contains(logged, "level=WARN") {
			t.Errorf("the %d-byte node did not log the %s-byte peer once:\n%s", c.own, other, logged)
		}
	}
	if !strings.Contains(jazzyLog.String(), "peer_nodes=[/old]") || !strings.Contains(humbleLog.String(), "peer_nodes=[/new]") {
		t.Errorf("the peers' nodes are not named:\n%s\n%s", jazzyLog, humbleLog)
	}

	// A broken writer of ros_discovery_info.
	dt, err := cdr.DiscoveryType(16)
	if err != nil {
		t.Fatal(err)
	}
	humble.mu.Lock()
	w, err := humble.pp.NewWriter(discoveryTopic, dt.DDSName, dds.QoS{Reliable: true, TransientLocal: true, Depth: 1})
	humble.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write([]byte{0, 1, 0, 0, 1, 2, 3, 4, 5, 6, 7}); err != nil {
		t.Fatal(err)
	}
	waitStats(t, "unreadable sample", jazzy, func(gid, bad int64) bool { return bad >= 1 && gid == 1 })
	if !strings.Contains(jazzyLog.String(), "ros_discovery_info cannot be read") {
		t.Errorf("the unreadable sample is not logged:\n%s", jazzyLog)
	}
}
