//go:build ros2

package test

// The rosbag2 world against the real ROS 2 Jazzy of ../shared: our MCAP is
// read by ros2 bag info and rosbag2_py and played by ros2 bag play into the
// node; what ros2 bag record writes of the camera and the node's pose (MCAP
// split by size, and sqlite3) is mapped by `lingbotmap run`, judged by
// `lingbotmap eval` against the live poses, and replayed by `lingbotmap bag
// play`. Jazzy's rosbag2 here has no zstd compressor, so compressed bags
// are covered by msgs/rosbag2's fixtures, not here.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/internal/shared"
	"github.com/lingbotmap/lingbotmap/msgs/rosbag2"
)

// bagFrames is how many camera frames the test plays.
const bagFrames = 6

func TestJazzyRosbag2(t *testing.T) {
	if !inNetns(t) {
		return
	}
	j := jazzyEnv(t, rmwCyclone)
	bin := ros2Binary(t)
	dir := t.TempDir()
	images, err := shared.Path("data", "courthouse")
	if err != nil {
		t.Fatal(err)
	}
	weights, err := shared.Path("golden", "weights.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	lb := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("lingbotmap %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	// Our MCAP, as ros2 bag info and rosbag2_py see it: the topic and its
	// count, the rosbag2 metadata record (distro, version), the type hash
	// and QoS of the channel.
	ours := filepath.Join(dir, "frames.mcap")
	lb("bag", "--format", "mcap", "--images", images, "--first-k", fmt.Sprint(bagFrames), "--rate", "4", "--out", ours)
	info := j.ros2(60*time.Second, "bag", "info", ours)
	for _, want := range []string{
		fmt.Sprintf("Topic: /camera/image_raw | Type: sensor_msgs/msg/Image | Count: %d | Serialization Format: cdr", bagFrames),
		"Storage id:        mcap", "ROS Distro:        jazzy", fmt.Sprintf("Messages:          %d", bagFrames),
	} {
		if !strings.Contains(info, want) {
			t.Fatalf("ros2 bag info %s: no %q:\n%s", ours, want, info)
		}
	}
	py := filepath.Join(dir, "bagmeta.py")
	if err := os.WriteFile(py, []byte(`import sys, rosbag2_py
m = rosbag2_py.Info().read_metadata(sys.argv[1], 'mcap')
r = rosbag2_py.SequentialReader()
r.open(rosbag2_py.StorageOptions(uri=sys.argv[1], storage_id='mcap'), rosbag2_py.ConverterOptions('', ''))
for t in r.get_all_topics_and_types():
    print('topic', t.name, t.type, t.type_description_hash, len(t.offered_qos_profiles))
print('metadata', m.version, m.ros_distro, m.message_count, [(x.topic_metadata.name, x.message_count) for x in m.topics_with_message_count])
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := j.run(60*time.Second, j.Python(), py, ours)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	ourHash := ""
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 5 && f[0] == "topic" && f[1] == "/camera/image_raw" && f[2] == "sensor_msgs/msg/Image" && f[4] == "1" {
			ourHash = f[3]
		}
	}
	if !strings.HasPrefix(ourHash, "RIHS01_") || !strings.Contains(out, fmt.Sprintf("metadata 9 jazzy %d [('/camera/image_raw', %d)]", bagFrames, bagFrames)) {
		t.Fatalf("rosbag2_py on our MCAP:\n%s", out)
	}

	// The node, two recorders (MCAP split by size: each image is larger
	// than the limit, so every frame starts a file; and sqlite3), and
	// ros2 bag play of our MCAP, paused until everyone has subscribed.
	startROS2Node(t, ros2NodeArgs(t, "lingbotmap", 154)...)
	recMCAP := filepath.Join(dir, "rec_mcap")
	recDB3 := filepath.Join(dir, "rec_db3")
	topics := []string{"/camera/image_raw", "/lingbotmap/pose"}
	recs := []*jazzyProc{
		j.start("ros2", append([]string{"bag", "record", "-o", recMCAP, "--max-bag-size", "100000"}, topics...)...),
		j.start("ros2", append([]string{"bag", "record", "-s", "sqlite3", "-o", recDB3}, topics...)...),
	}
	echo := j.start("ros2", "topic", "echo", "/lingbotmap/pose", "geometry_msgs/msg/PoseStamped", "--field", "header.stamp")
	player := j.start("ros2", "bag", "play", "--start-paused", ours)
	for _, r := range recs {
		for _, topic := range topics {
			r.waitOutput(t, "Subscribed to topic '"+topic+"'", 60*time.Second)
		}
	}
	// The node's camera subscription, the two recorders' and the player's
	// publisher are all in the graph before the first frame goes out.
	j.ros2Until(60*time.Second, "Subscription count: 3", "topic", "info", "/camera/image_raw", "--no-daemon")
	j.ros2Until(60*time.Second, "Subscription count: 3", "topic", "info", "/lingbotmap/pose", "--no-daemon")
	// The graph lists an endpoint before DDS has matched it. The node's pose
	// writer is volatile: it must have matched the three subscribers. Its
	// image reader is best effort: it drops a frame that comes before its
	// side of the match with the player, or while it is behind on a loaded
	// machine. So the player sends one frame at a time (play_next), each
	// once the node's /diagnostics has counted the one before.
	diag := j.start("ros2", "topic", "echo", "/diagnostics", "diagnostic_msgs/msg/DiagnosticArray")
	waitDiagEcho(t, diag, "subscribers_matched:/lingbotmap/pose", 3)
	waitDiagEcho(t, diag, "publishers_matched:/camera/image_raw", 1)
	for i := range bagFrames {
		j.ros2(60*time.Second, "service", "call", "/rosbag2_player/play_next", "rosbag2_interfaces/srv/PlayNext")
		waitDiagEcho(t, diag, "frames_received", i+1)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for strings.Count(echo.out.String(), "nanosec:") < bagFrames {
		if time.Now().After(deadline) {
			t.Fatalf("the node's poses: %d of %d arrived:\n%s", strings.Count(echo.out.String(), "nanosec:"), bagFrames, echo.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := player.stop(30 * time.Second); err != nil && !strings.Contains(err.Error(), "signal") {
		t.Logf("ros2 bag play: %v", err)
	}
	for _, r := range recs {
		_ = r.stop(30 * time.Second) // SIGINT is how a recording ends
	}

	// What ros2 bag record wrote: metadata.yaml, the splits in order, both
	// topics whole, and the image type hash real rosbag2 saw on the wire
	// equal to the one our MCAP carries.
	for _, rec := range []string{recMCAP, recDB3} {
		m, err := rosbag2.Open(rec)
		if err != nil {
			t.Fatal(err)
		}
		md := m.Metadata()
		files := m.Files()
		m.Close()
		if md == nil || md.Topic("/camera/image_raw") == nil || md.Topic("/lingbotmap/pose") == nil {
			t.Fatalf("%s: metadata %+v", rec, md)
		}
		if n := md.Topic("/camera/image_raw").MessageCount; n != bagFrames {
			t.Fatalf("%s holds %d images, want %d", rec, n, bagFrames)
		}
		if n := md.Topic("/lingbotmap/pose").MessageCount; n != bagFrames {
			t.Fatalf("%s holds %d poses, want %d", rec, n, bagFrames)
		}
		if h := md.Topic("/camera/image_raw").Topic.TypeDescriptionHash; h != ourHash {
			t.Errorf("%s: rosbag2 recorded sensor_msgs/msg/Image with hash %s, our MCAP says %s", rec, h, ourHash)
		}
		// ros2 bag play offered the QoS it read from our MCAP.
		if q := string(md.Topic("/camera/image_raw").Topic.OfferedQoSProfiles); !strings.Contains(q, "reliability: reliable") ||
			!strings.Contains(q, "durability: volatile") || !strings.Contains(q, "depth: 10") {
			t.Errorf("%s: the player offered %s", rec, q)
		}
		if rec == recMCAP && len(files) < 3 {
			t.Errorf("%s: %d split files (%v), want one per frame or so", rec, len(files), files)
		}
		if rec == recDB3 && (md.StorageIdentifier != "sqlite3" || !strings.HasSuffix(files[0], ".db3")) {
			t.Errorf("%s: storage %s, files %v", rec, md.StorageIdentifier, files)
		}

		// run maps the recorded camera; eval compares the live poses
		// recorded beside it with run's trajectory: the same engine on the
		// same frames.
		outDir := rec + "_run"
		lb("run", rec, "--weights", weights, "--image-width", "154", "--scale-frames", "3", "--sliding-window", "4",
			"--threads", "2", "--no-progress", "--out", outDir)
		var rj struct {
			Status string `json:"status"`
			Frames struct {
				Results int `json:"results"`
			} `json:"frames"`
		}
		b, err := os.ReadFile(filepath.Join(outDir, "run.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &rj); err != nil || rj.Frames.Results != bagFrames {
			t.Fatalf("%s: run.json %s (%v)", rec, b, err)
		}
		js := filepath.Join(dir, filepath.Base(rec)+"_eval.json")
		lb("eval", rec, filepath.Join(outDir, "trajectory.tum"), "--json", js)
		var rep struct {
			Pairs int `json:"associated_pairs"`
			ATE   struct {
				RMSE float64 `json:"rmse"`
			} `json:"ate"`
		}
		if b, err = os.ReadFile(js); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &rep); err != nil || rep.Pairs != bagFrames || !(rep.ATE.RMSE < 1e-4) {
			t.Fatalf("%s: eval of the live poses against run: %s (%v)", rec, b, err)
		}
		t.Logf("%s (%s, files %v): run mapped %d frames; eval of the live poses against run: %d pairs, ATE RMSE %.3g",
			filepath.Base(rec), md.StorageIdentifier, files, rj.Frames.Results, rep.Pairs, rep.ATE.RMSE)
	}

	// The real recording damaged: a split file gone is partial input (exit
	// 4, the other frames mapped); a metadata.yaml that names the wrong
	// storage is refused with the reason.
	cut := filepath.Join(dir, "rec_cut")
	if out, err := exec.Command("cp", "-r", recMCAP, cut).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	if err := os.Remove(filepath.Join(cut, "rec_mcap_1.mcap")); err != nil {
		t.Fatal(err)
	}
	code := func(args ...string) (int, string) {
		out, err := exec.Command(bin, args...).CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	if c, out := code("run", cut, "--weights", weights, "--image-width", "154", "--scale-frames", "3", "--sliding-window", "4",
		"--threads", "2", "--no-progress", "--out", cut+"_run"); c != 4 || !strings.Contains(out, "split file rec_mcap_1.mcap is missing") {
		t.Errorf("run on a bag without one split: exit %d\n%s", c, out)
	}
	if c, out := code("eval", cut, filepath.Join(recMCAP+"_run", "trajectory.tum")); c != 4 || !strings.Contains(out, "split file rec_mcap_1.mcap is missing") {
		t.Errorf("eval on a bag without one split: exit %d\n%s", c, out)
	}
	meta, err := os.ReadFile(filepath.Join(recDB3, "metadata.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	wrong := filepath.Join(dir, "rec_wrong")
	if out, err := exec.Command("cp", "-r", recDB3, wrong).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(wrong, "metadata.yaml"), []byte(strings.Replace(string(meta), "storage_identifier: sqlite3", "storage_identifier: mcap", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, out := code("run", wrong, "--weights", weights, "--no-progress", "--out", wrong+"_run"); c != 1 ||
		!strings.Contains(out, `metadata.yaml says storage_identifier "mcap", but rec_db3_0.db3 is an SQLite (sqlite3) file`) {
		t.Errorf("run on a bag whose metadata names the wrong storage: exit %d\n%s", c, out)
	}

	// lingbotmap bag play replays a recorded bag directory (sqlite3).
	replay := j.start("ros2", "topic", "echo", "/replayed", "sensor_msgs/msg/Image", "--field", "header.stamp")
	j.ros2Until(60*time.Second, "Subscription count: 1", "topic", "info", "/replayed", "--no-daemon")
	play := exec.Command(bin, "bag", "play", "--delay", "2s", "--rate", "4", recDB3, "--ros-args", "-r", "/camera/image_raw:=/replayed")
	play.Env = append(os.Environ(), "CYCLONEDDS_URI="+cycloneURI)
	if out, err := play.CombinedOutput(); err != nil || !strings.Contains(string(out), fmt.Sprintf("published %d messages of /camera/image_raw", bagFrames)) {
		t.Fatalf("lingbotmap bag play %s: %v\n%s", recDB3, err, out)
	}
	replay.waitOutput(t, strings.Repeat("nanosec:", 1), 30*time.Second)
	deadline = time.Now().Add(30 * time.Second)
	for strings.Count(replay.out.String(), "nanosec:") < bagFrames {
		if time.Now().After(deadline) {
			t.Fatalf("ros2 topic echo of the replay: %d of %d images:\n%s", strings.Count(replay.out.String(), "nanosec:"), bagFrames, replay.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitDiagEcho waits until the newest value of key in the /diagnostics that
// ros2 topic echo printed is at least want.
func waitDiagEcho(t *testing.T, echo *jazzyProc, key string, want int) {
	t.Helper()
	re := regexp.MustCompile(`key: ` + regexp.QuoteMeta(key) + `\s+value: '(\d+)'`)
	last := func() int {
		m := re.FindAllStringSubmatch(echo.out.String(), -1)
		if len(m) == 0 {
			return -1
		}
		v, _ := strconv.Atoi(m[len(m)-1][1])
		return v
	}
	for deadline := time.Now().Add(60 * time.Second); last() < want; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("/diagnostics %s = %d after 60s, want %d", key, last(), want)
		}
	}
}
