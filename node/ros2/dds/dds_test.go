//go:build ros2

package dds

import (
	"bytes"
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/node/ros2/ros2test"
)

func TestMain(m *testing.M) { ros2test.InNetns(m) }

func newParticipant(t *testing.T) *Participant {
	t.Helper()
	p, err := NewParticipant(ParticipantConfig{UserData: "enclave=/;"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The Cyclone C peer publishes images with idlc-generated types; their raw
// bytes arrive intact through the raw-CDR type.
func TestPeerImagesArrive(t *testing.T) {
	peers, err := ros2test.BuildPeers()
	if err != nil {
		t.Fatal(err)
	}
	p := newParticipant(t)
	got := make(chan Sample, 10)
	r, err := p.NewReader("rt/camera/image_raw", "sensor_msgs::msg::dds_::Image_", QoS{Depth: 5}, func(s Sample) { got <- s })
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const w, h, n = 64, 48, 3
	out, err := exec.CommandContext(ctx, peers.CyclonePeer, "pub-image", "3", "64", "48").CombinedOutput()
	if err != nil {
		t.Fatalf("peer: %v\n%s", err, out)
	}
	for i := range n {
		select {
		case s := <-got:
			if !bytes.HasPrefix(s.Data, []byte{0, 1, 0, 0}) {
				t.Fatalf("image %d: encapsulation header % x, want 00 01 00 00", i, s.Data[:4])
			}
			// rgb8 pixels are the last w*h*3 bytes (a multiple of 4: no padding).
			px := s.Data[len(s.Data)-w*h*3:]
			for j, b := range px {
				if want := byte((j*7 + i) & 0xff); b != want {
					t.Fatalf("image %d byte %d = %d, want %d", i, j, b, want)
				}
			}
			if s.Publication == 0 || s.SourceTime <= 0 {
				t.Errorf("image %d: publication %d, source time %d", i, s.Publication, s.SourceTime)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("got %d of %d images; peer said:\n%s", i, n, out)
		}
	}
}

// A transient-local writer's last sample reaches a reader created after it
// was written, and the reader sees the writer go when it is closed.
func TestLateJoinerAndLeave(t *testing.T) {
	a, b := newParticipant(t), newParticipant(t)
	q := QoS{Reliable: true, TransientLocal: true, Depth: 1, UserData: "typehash=RIHS01_00;"}
	w, err := a.NewWriter("rt/test/latched", "std_msgs::msg::dds_::String_", q)
	if err != nil {
		t.Fatal(err)
	}
	if w.GUID() == (GUID{}) || w.InstanceHandle() == 0 {
		t.Fatalf("writer GUID %v, instance handle %d", w.GUID(), w.InstanceHandle())
	}
	for _, msg := range []string{"first", "last"} {
		// std_msgs/String: length with NUL, bytes, NUL.
		cdr := append([]byte{0, 1, 0, 0, byte(len(msg) + 1), 0, 0, 0}, msg...)
		if err := w.Write(append(cdr, 0)); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan Sample, 4)
	r, err := b.NewReader("rt/test/latched", "std_msgs::msg::dds_::String_", q, func(s Sample) { got <- s })
	if err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		want := []byte{0, 1, 0, 0, 5, 0, 0, 0, 'l', 'a', 's', 't', 0}
		if !bytes.Equal(s.Data[:len(want)], want) || len(s.Data)%4 != 0 {
			t.Fatalf("late joiner got % x, want % x padded to 4", s.Data, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("late joiner got nothing")
	}
	waitFor(t, "the writer to match", func() bool { n, _ := r.Matched(); return n == 1 })
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reader to see the writer go", func() bool { n, _ := r.Matched(); return n == 0 })
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

// A sample of several megabytes (a dense point cloud) arrives whole over
// a reliable topic, fragmented and reassembled by DDS.
func TestLargeSample(t *testing.T) {
	a, b := newParticipant(t), newParticipant(t)
	q := QoS{Reliable: true, Depth: 2}
	w, err := a.NewWriter("rt/test/big", "sensor_msgs::msg::dds_::PointCloud2_", q)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan Sample, 2)
	r, err := b.NewReader("rt/test/big", "sensor_msgs::msg::dds_::PointCloud2_", q, func(s Sample) { got <- s })
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reader to match", func() bool { n, _ := w.Matched(); return n == 1 })
	big := make([]byte, 3_500_001)
	for i := range big {
		big[i] = byte(i * 31 >> 3)
	}
	copy(big, []byte{0, 1, 0, 0})
	if err := w.Write(big); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		// The payload is padded to a multiple of 4 with zeros.
		if len(s.Data) != 3_500_004 || !bytes.Equal(s.Data[:len(big)], big) || !bytes.Equal(s.Data[len(big):], []byte{0, 0, 0}) {
			t.Fatalf("got %d bytes, not the %d written (padded to 4)", len(s.Data), len(big))
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the large sample never arrived")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}
