//go:build ros2

package test

import (
	"crypto/sha256"
	"encoding/hex"
	"hash/fnv"
	"image"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/internal/shared"
	"github.com/lingbotmap/lingbotmap/node/ros1/rostest"
)

// TestROS2PeersAgree checks the independent peers against each other before
// they judge the node: Cyclone frames (decoded by libpng) reach a Cyclone
// listener equal to Go's own PNG decoding, a Cyclone pose reaches the Cyclone,
// Fast DDS and foxglove subscribers, a 3.4 MB cloud reaches Cyclone and
// foxglove whole, and the Trigger client gets its reply from the C server.
func TestROS2PeersAgree(t *testing.T) {
	if !inNetns(t) {
		return
	}
	dump := t.TempDir()
	l := startPeer(t, "cyclone-peer", "listen", "--secs", "120", "--dump", dump,
		"image:/camera/image_raw:be", "pose:/peer/pose", "cloud:/peer/cloud")
	l.waitFor(t, "the listener", 1, 10*time.Second, func(e peerEvent) bool { return e.Event == "ready" })
	fast := startPeer(t, "fastdds-peer", "sub-pose", "/peer/pose", "3")
	foxPose := startPeer(t, "foxglove-peer.js", "/peer/pose", "geometry_msgs/msg/PoseStamped", "3", "60")
	foxCloud := startPeer(t, "foxglove-peer.js", "/peer/cloud", "sensor_msgs/msg/PointCloud2", "1", "60")
	for _, p := range []*peer{fast, foxPose, foxCloud} {
		p.waitFor(t, "the subscriber", 1, 20*time.Second, func(e peerEvent) bool { return e.Event == "ready" })
	}

	dir, err := shared.Path("data", "courthouse")
	if err != nil {
		t.Fatal(err)
	}
	runPeer(t, 60*time.Second, "cyclone-peer", "pub-images", dir, "2")
	frames := rostest.Frames(t, 2)
	imgs := l.waitFor(t, "2 images", 2, 10*time.Second, func(e peerEvent) bool { return e.Event == "msg" && e.Kind == "image" })
	for i, e := range imgs {
		want := rgb8(frames[i])
		if got := readDump(t, e); string(got) != string(want) || e.Encoding != "rgb8" || e.Width != 518 || e.Height != 294 || e.Step != 3*518 {
			t.Fatalf("image %d: %dx%d %s step %d, pixels equal to Go's PNG decoding: %v", i, e.Width, e.Height, e.Encoding, e.Step, string(got) == string(want))
		}
		if !e.Stamp.Time().Equal(rostest.StampOf(i)) || e.FrameID != "camera_optical" {
			t.Fatalf("image %d: stamp %v frame %q", i, e.Stamp.Time(), e.FrameID)
		}
	}

	runPeer(t, 60*time.Second, "cyclone-peer", "pub-pose", "--readers", "3", "/peer/pose", "3")
	m := l.waitFor(t, "the pose writer", 1, 10*time.Second, func(e peerEvent) bool { return e.Event == "matched" && e.Topic == "/peer/pose" && e.Writers == 1 })
	if ep := m[0].Endpoints; len(ep) != 1 || ep[0].Type != "geometry_msgs::msg::dds_::PoseStamped_" || len(ep[0].GUID) != 32 || ep[0].ParticipantUserData == nil {
		t.Fatalf("the matched pose writer: %+v", ep)
	}
	fast.wait(t, 30*time.Second)
	foxPose.wait(t, 30*time.Second)
	for name, p := range map[string]*peer{"cyclone": l, "fastdds": fast, "foxglove": foxPose} {
		poses := p.waitFor(t, name+" poses", 3, 10*time.Second, func(e peerEvent) bool { return e.Event == "msg" && e.Kind == "pose" })
		for i, e := range poses {
			f := float64(i)
			if e.Position != [3]float64{f, 2 * f, 3 * f} || e.Orientation != [4]float64{0, 0, 0, 1} || e.FrameID != "map" || !e.Stamp.Time().Equal(rostest.StampOf(i)) {
				t.Fatalf("%s pose %d: %+v", name, i, e)
			}
		}
	}

	const points = 210000 // 3.36 MB
	runPeer(t, 60*time.Second, "cyclone-peer", "pub-cloud", "--readers", "2", "/peer/cloud", "210000")
	foxCloud.wait(t, 60*time.Second)
	clouds := l.waitFor(t, "the cloud", 1, 10*time.Second, func(e peerEvent) bool { return e.Event == "msg" && e.Kind == "cloud" })
	data := readDump(t, clouds[0])
	if clouds[0].Width != points || len(data) != 16*points {
		t.Fatalf("cyclone got %d points, %d bytes", clouds[0].Width, len(data))
	}
	h := fnv.New64a()
	h.Write(data)
	if got := hex.EncodeToString(h.Sum(nil)); got != clouds[0].FNV1a {
		t.Fatalf("the dump's FNV-1a %s, the peer printed %s", got, clouds[0].FNV1a)
	}
	sum := sha256.Sum256(data)
	fc := foxCloud.find(func(e peerEvent) bool { return e.Event == "msg" })
	if len(fc) != 1 || fc[0].Width != points || fc[0].DataLen != 16*points || fc[0].SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("foxglove's cloud differs from cyclone's: %+v", fc)
	}
	if fc[0].First[2] != [3]float64{2, -2, 1} {
		t.Fatalf("foxglove's third point %v, want (2, -2, 1)", fc[0].First[2])
	}

	// Bad input: pub-bad's images are valid CDR with bad contents, which
	// Cyclone decodes; pub-corrupt's are broken CDR, which it rejects.
	bad := startPeer(t, "cyclone-peer", "listen", "--secs", "120", "image:/peer/bad")
	bad.waitFor(t, "the listener", 1, 10*time.Second, func(e peerEvent) bool { return e.Event == "ready" })
	for _, kind := range []string{"encoding", "step", "short"} {
		runPeer(t, 30*time.Second, "cyclone-peer", "pub-bad", "--topic", "/peer/bad", kind)
	}
	for _, kind := range []string{"truncated", "overlength", "huge"} {
		runPeer(t, 60*time.Second, "fastdds-peer", "pub-corrupt", "/peer/bad", kind)
	}
	// A last valid one marks the end: every corrupt sample was acknowledged
	// by the listener's reader before it was sent, so one that Cyclone had
	// wrongly accepted would be printed before it (one reader, in order).
	runPeer(t, 30*time.Second, "cyclone-peer", "pub-bad", "--topic", "/peer/bad", "encoding")
	got := bad.waitFor(t, "the bad images and the last one", 4, 30*time.Second, func(e peerEvent) bool { return e.Event == "msg" })
	if len(got) != 4 || got[0].Encoding != "yuv422" || got[1].Step != 10 || got[2].DataLen != 24*3 || got[3].Encoding != "yuv422" {
		t.Fatalf("Cyclone decoded %d bad images (want the 3 valid CDR ones and the last, not the corrupt ones): %+v", len(got), got)
	}

	srv := startPeer(t, "cyclone-peer", "serve", "--secs", "60", "/peer/trigger")
	srv.waitFor(t, "the server", 1, 10*time.Second, func(e peerEvent) bool { return e.Event == "ready" })
	c := runPeer(t, 30*time.Second, "cyclone-peer", "call", "/peer/trigger")
	if r := c.find(func(e peerEvent) bool { return e.Event == "reply" }); len(r) != 1 || !r[0].Success || r[0].Message != "peer-ok 1" {
		t.Fatalf("Trigger reply %+v", r)
	}
}

// rgb8 packs an image's pixels as rgb8 rows.
func rgb8(img *image.RGBA) []byte {
	w, h := img.Bounds().Dx(), img.Bounds().Dy()
	out := make([]byte, 0, 3*w*h)
	for y := 0; y < h; y++ {
		row := img.Pix[y*img.Stride:]
		for x := 0; x < w; x++ {
			out = append(out, row[4*x], row[4*x+1], row[4*x+2])
		}
	}
	return out
}
