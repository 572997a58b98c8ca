//go:build ros2

package bagplay

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"

	"github.com/lingbotmap/lingbotmap/node"
	"github.com/lingbotmap/lingbotmap/node/ros2"
	"github.com/lingbotmap/lingbotmap/node/ros2/ros2test"
)

// Every DDS participant of these tests lives in a private loopback-only
// network namespace.
func TestMain(m *testing.M) { ros2test.InNetns(m) }

func transport(t *testing.T, name string, args ...string) *ros2.Transport {
	t.Helper()
	a, _, err := ros2.ParseArgs(append([]string{"--ros-args", "-r", "__node:=" + name}, args...), func(string) string { return "" }, name)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := ros2.New(a, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// A replay over real DDS: a subscriber with the camera input's sensor-data
// QoS receives the good images, remapped, with their recorded stamps and pace.
func TestPlayOverDDS(t *testing.T) {
	path := writeBag(t, "- history: 3\n  depth: 0\n  reliability: 1\n  durability: 2\n")
	sub := transport(t, "listener")
	var mu sync.Mutex
	var got []*sensor_msgs.Image
	var at []time.Time
	c, err := sub.Subscribe(node.TopicSpec{Name: "/cam", Type: &sensor_msgs.Image{}, Role: node.RoleSensor}, func(msg any, err error) {
		if err != nil {
			t.Errorf("subscriber: %v", err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		got = append(got, msg.(*sensor_msgs.Image))
		at = append(at, time.Now())
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	player := transport(t, "player", "-r", "/camera/image_raw:=/cam")
	o := DefaultOptions()
	o.Delay = 2 * time.Second // discovery on loopback
	res, err := Play(context.Background(), path, player, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Published != 3 || res.Skipped != 1 {
		t.Fatalf("result %+v", res)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("received %d images, want 3", len(got))
	}
	for i, ms := range []int{0, 100, 400} {
		if !got[i].Header.Stamp.Equal(stampOf(ms)) || got[i].Header.FrameId != "cam" || got[i].Data[0] != uint8([]int{0, 1, 3}[i]) {
			t.Errorf("image %d: %+v", i, got[i].Header)
		}
	}
	if gap := at[2].Sub(at[0]); gap < 350*time.Millisecond || gap > 700*time.Millisecond {
		t.Errorf("first to last image took %v, recorded 400ms", gap)
	}
}
