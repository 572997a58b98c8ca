package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/foxglove/mcap/go/mcap"

	"github.com/lingbotmap/lingbotmap/engine/golden"
	"github.com/lingbotmap/lingbotmap/engine/traj"
	"github.com/lingbotmap/lingbotmap/internal/shared"
	"github.com/lingbotmap/lingbotmap/msgs/mcapbag"
)

// mcapCheckLine is one line of test/mcapcheck/mcap-check.mjs's output.
type mcapCheckLine struct {
	Profile     string `json:"profile"`
	Library     string `json:"library"`
	Messages    string `json:"messages"`
	Compression string `json:"compression"`
	Schema      *struct {
		Name     string `json:"name"`
		Encoding string `json:"encoding"`
	} `json:"schema"`
	Channel *struct {
		Topic    string  `json:"topic"`
		Encoding string  `json:"encoding"`
		QoS      *string `json:"qos"`
	} `json:"channel"`
	Msg *struct {
		Seq     uint32 `json:"seq"`
		LogTime string `json:"logTime"`
		Topic   string `json:"topic"`
		Type    string `json:"type"`
		Header  struct {
			FrameID string `json:"frame_id"`
			Sec     int64  `json:"sec"`
			Nanosec int64  `json:"nanosec"`
		} `json:"header"`
		Width    uint32 `json:"width"`
		Height   uint32 `json:"height"`
		Encoding string `json:"encoding"`
		Step     uint32 `json:"step"`
		Format   string `json:"format"`
		Data     struct {
			Bytes  int    `json:"bytes"`
			SHA256 string `json:"sha256"`
		} `json:"data"`
	} `json:"msg"`
	Decoded *int `json:"decoded"`
}

// mcapCheck reads path with the independent TypeScript reader (npm packages
// installed by test/mcapcheck/setup.sh into a cache outside the repository).
func mcapCheck(t *testing.T, path string) []mcapCheckLine {
	t.Helper()
	setup, err := filepath.Abs(filepath.Join("..", "..", "test", "mcapcheck", "setup.sh"))
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command("bash", setup)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("test/mcapcheck/setup.sh (needs Node.js >= 18 with npm): %v\n%s", err, stderr.String())
	}
	dir := strings.TrimSpace(string(out))
	stderr.Reset()
	cmd = exec.Command("node", filepath.Join(dir, "mcap-check.mjs"), path)
	cmd.Stderr = &stderr
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("mcap-check.mjs %s: %v\n%s", path, err, stderr.String())
	}
	var lines []mcapCheckLine
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l mcapCheckLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("mcap-check.mjs line %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	return lines
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// The ROS 2 bag holds the courthouse frames as sensor_msgs/msg/Image with the
// right stamps and pixels; the mcap Go reader and the independent TypeScript
// reader (decoding with the schema stored in the file) agree.
func TestBagCommandMCAP(t *testing.T) {
	dir := courthouseDir(t)
	for _, compressed := range []bool{false, true} {
		o := defaultBagOptions()
		o.images, o.format, o.firstK, o.rate, o.compressed = dir, "mcap", 5, 4, compressed
		o.out = filepath.Join(t.TempDir(), "frames.mcap")
		if err := runBag(context.Background(), o, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		typ := "sensor_msgs/msg/Image"
		if compressed {
			typ = "sensor_msgs/msg/CompressedImage"
		}

		// The Go reader of the mcap library, with our CDR decoder.
		f, err := os.Open(o.out)
		if err != nil {
			t.Fatal(err)
		}
		mr, err := mcap.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		info, err := mr.Info()
		if err != nil {
			t.Fatal(err)
		}
		if info.Header.Profile != "ros2" || info.Statistics.MessageCount != 5 || len(info.Channels) != 1 || len(info.Schemas) != 1 {
			t.Fatalf("header %+v, statistics %+v", info.Header, info.Statistics)
		}
		for _, s := range info.Schemas {
			if s.Name != typ || s.Encoding != "ros2msg" || !strings.Contains(string(s.Data), "MSG: std_msgs/Header\n") {
				t.Fatalf("schema %s %s:\n%s", s.Name, s.Encoding, s.Data)
			}
		}
		for _, c := range info.Channels {
			if c.Topic != "/camera/image_raw" || c.MessageEncoding != "cdr" || !strings.Contains(c.Metadata["offered_qos_profiles"], "reliability: reliable") ||
				!strings.HasPrefix(c.Metadata["topic_type_hash"], "RIHS01_") {
				t.Fatalf("channel %+v", c)
			}
		}
		it, err := mr.Messages()
		if err != nil {
			t.Fatal(err)
		}
		wantSHA := map[uint32]string{}
		for i := range 5 {
			_, _, m, err := it.NextInto(nil)
			if err != nil {
				t.Fatal(err)
			}
			stamp := time.Unix(1700000000, int64(i)*250_000_000)
			if m.LogTime != uint64(stamp.UnixNano()) || m.Sequence != uint32(i+1) {
				t.Fatalf("message %d: log time %d, sequence %d", i, m.LogTime, m.Sequence)
			}
			msg := &mcapbag.Message{Channel: &mcapbag.Channel{MessageEncoding: "cdr"}, Data: m.Data}
			file := filepath.Join(dir, []string{"000000.png", "000001.png", "000002.png", "000003.png", "000004.png"}[i])
			if compressed {
				var c sensor_msgs.CompressedImage
				if err := msg.Decode(&c); err != nil {
					t.Fatal(err)
				}
				raw, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				if c.Format != "png" || !bytes.Equal(c.Data, raw) || !c.Header.Stamp.Equal(stamp) || c.Header.FrameId != "camera" {
					t.Fatalf("message %d: %q %v %q, %d bytes", i, c.Format, c.Header.Stamp, c.Header.FrameId, len(c.Data))
				}
				wantSHA[m.Sequence] = sha(c.Data)
				continue
			}
			var im sensor_msgs.Image
			if err := msg.Decode(&im); err != nil {
				t.Fatal(err)
			}
			want, err := rawFrame(im.Header, file)
			if err != nil {
				t.Fatal(err)
			}
			if !im.Header.Stamp.Equal(stamp) || im.Header.FrameId != "camera" || im.Width != 518 || im.Height != 294 ||
				im.Encoding != "rgb8" || im.Step != 3*518 || !bytes.Equal(im.Data, want.Data) {
				t.Fatalf("message %d: %+v %dx%d %s", i, im.Header, im.Width, im.Height, im.Encoding)
			}
			wantSHA[m.Sequence] = sha(im.Data)
		}
		f.Close()

		// The independent reader.
		lines := mcapCheck(t, o.out)
		if len(lines) != 1+1+1+5+1 {
			t.Fatalf("mcap-check.mjs printed %d lines", len(lines))
		}
		if h := lines[0]; h.Profile != "ros2" || h.Messages != "5" || h.Compression != "zstd" {
			t.Errorf("mcap-check.mjs header %+v", h)
		}
		if s := lines[1].Schema; s == nil || s.Name != typ || s.Encoding != "ros2msg" {
			t.Errorf("mcap-check.mjs schema %+v", lines[1])
		}
		if c := lines[2].Channel; c == nil || c.Topic != "/camera/image_raw" || c.Encoding != "cdr" || c.QoS == nil || !strings.Contains(*c.QoS, "durability: volatile") {
			t.Errorf("mcap-check.mjs channel %+v", lines[2])
		}
		for i, l := range lines[3:8] {
			m := l.Msg
			stamp := time.Unix(1700000000, int64(i)*250_000_000)
			if m == nil || m.Type != typ || m.Header.FrameID != "camera" || m.Header.Sec != stamp.Unix() ||
				m.Header.Nanosec != int64(stamp.Nanosecond()) || m.LogTime != strconv.FormatInt(stamp.UnixNano(), 10) ||
				m.Data.SHA256 != wantSHA[m.Seq] {
				t.Fatalf("mcap-check.mjs message %d: %+v", i, l.Msg)
			}
			if compressed && m.Format != "png" || !compressed && (m.Width != 518 || m.Height != 294 || m.Encoding != "rgb8" || m.Step != 1554) {
				t.Fatalf("mcap-check.mjs message %d: %+v", i, m)
			}
		}
		if d := lines[8].Decoded; d == nil || *d != 5 {
			t.Errorf("mcap-check.mjs decoded %+v", lines[8])
		}
	}
}

// lingbotmap run on the ROS 2 bag gives the same poses as on the folder it
// was made from, with the tiny golden model.
func TestRunMCAPEqualsFolder(t *testing.T) {
	dir := courthouseDir(t)
	gdir, err := shared.Path("golden", "images_kf1")
	if err != nil {
		t.Fatal(err)
	}
	man, err := golden.Load(gdir)
	if err != nil {
		t.Fatal(err)
	}
	weights, err := shared.Path("golden", "weights.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	b := defaultBagOptions()
	b.images, b.format, b.firstK = dir, "mcap", 6
	b.out = filepath.Join(t.TempDir(), "frames.mcap")
	if err := runBag(context.Background(), b, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	var poses [][]traj.Pose
	for _, input := range []string{dir, b.out} {
		o := testRunOptions(t, nil)
		o.input, o.src.FirstK = input, 6
		o.newStream = newEngineStream
		o.cfg.Weights = weights
		o.cfg.ImageWidth, o.cfg.ScaleFrames = man.Config.ImgW, man.Settings.NumScaleFrames
		o.cfg.SlidingWindow, o.cfg.MaxFrames = man.Config.MaxFrameNum, man.Config.MaxFrameNum
		if err := runRun(context.Background(), o, true); err != nil {
			t.Fatalf("%s: %v", input, err)
		}
		tr, err := traj.ReadTUMFile(filepath.Join(o.out, "trajectory.tum"))
		if err != nil {
			t.Fatal(err)
		}
		if len(tr) != 6 {
			t.Fatalf("%s: %d poses, want 6", input, len(tr))
		}
		poses = append(poses, tr)
		if input == b.out {
			rec := readRunJSON(t, o.out)
			if !strings.Contains(rec.Input.Description, "MCAP") || rec.Input.Skipped != 0 {
				t.Errorf("run.json input %+v", rec.Input)
			}
			for i, p := range tr {
				if want := 1700000000 + 0.1*float64(i); math.Abs(p.Time-want) > 1e-6 {
					t.Errorf("MCAP pose %d at %.6f s, want the message stamp %.6f", i, p.Time, want)
				}
			}
		}
	}
	for i := range poses[0] {
		a, c := poses[0][i], poses[1][i]
		if a.T != c.T || a.R != c.R {
			t.Fatalf("pose %d: folder %+v, MCAP %+v", i, a, c)
		}
	}
}
