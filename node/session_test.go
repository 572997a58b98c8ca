package node_test

import (
	"context"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/nav_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/cpu"
	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/internal/shared/sharedtest"
	"github.com/lingbotmap/lingbotmap/node"
	"github.com/lingbotmap/lingbotmap/node/nodetest"
)

func cpuFactory(cfg engine.Config) (backend.Backend, error) {
	return cpu.New(cpu.Config{Threads: cfg.Threads}), nil
}

// goldenNodeConfig runs the golden tiny checkpoint with the golden cache
// settings on 70×42 images, every second frame a keyframe.
func goldenNodeConfig(t *testing.T) node.Config {
	cfg := fastConfig(t)
	e := &cfg.Engine
	e.Weights = sharedtest.Path(t, "golden", "weights.safetensors")
	e.ImageWidth, e.ScaleFrames, e.SlidingWindow, e.MaxFrames = 70, 3, 4, 256
	e.KeyframeInterval, e.Threads = 2, 2
	// streaming: every result comes out at once (windowed mode holds a
	// window's results until the next window or the end)
	e.Windowed = false
	return cfg
}

// runEngineNode runs a node on the real engine (from a saved session when
// resume is set), delivers frames from..to−1 (calling before, when given,
// ahead of each) and returns the node's transport once the path holds want
// poses; stop ends it.
func runEngineNode(t *testing.T, cfg node.Config, resume string, from, to, want int, before ...func(i int)) (*nodetest.Transport, func() error) {
	t.Helper()
	tr := nodetest.New("/lbm", nil)
	n, err := node.New(node.Options{Config: cfg, Transport: tr, Log: slog.New(slog.DiscardHandler),
		NewStream: func(ctx context.Context, c node.Config) (engine.Stream, error) {
			return engine.New(ctx, c.Engine, cpuFactory, nil)
		},
		Resume: resume,
		ResumeStream: func(ctx context.Context, c node.Config, r io.Reader) (engine.Stream, error) {
			return engine.Resume(ctx, c.Engine, cpuFactory, r, nil)
		}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runNode(t, n, tr)
	for i := from; i < to; i++ {
		for _, b := range before {
			b(i)
		}
		if err := tr.Deliver("/image", frame(i, 70, 42, "cam"), nil); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the path to hold every pose", 30*time.Second, func() bool {
		p, _ := tr.Last("/lbm/path").(*nav_msgs.Path)
		return p != nil && len(p.Poses) == want
	})
	return tr, stop
}

// TestNodeSaveSessionAndResume: a node saves its session with
// ~save_session after 7 frames (or by itself every 5 frames, with
// session_save_every) and stops; a new node started from it maps the
// remaining frames: its poses equal an uninterrupted node's (1e-6 relative)
// and its path holds the whole trajectory.
func TestNodeSaveSessionAndResume(t *testing.T) {
	cfg := goldenNodeConfig(t)
	const total = 12
	full, stopFull := runEngineNode(t, cfg, "", 0, total, total)
	want := full.Messages("/lbm/pose")
	if err := stopFull(); err != nil {
		t.Fatal(err)
	}
	t.Run("save_session", func(t *testing.T) {
		cfg := cfg
		cfg.SaveDir = t.TempDir()
		// 7 frames: 3 scale frames and 4 streamed, the last one a keyframe
		first, stop := runEngineNode(t, cfg, "", 0, 7, 7)
		if _, err := first.Call("/lbm/save_session"); err != nil {
			t.Fatal(err)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		checkResumed(t, cfg, 7, want)
	})
	t.Run("session_save_every", func(t *testing.T) {
		cfg := cfg
		cfg.SaveDir = t.TempDir()
		cfg.SessionSaveEvery = 5
		// saved after frame 4 (the save runs behind the deliveries, so
		// frame 5 waits for the file); frames 5 and 6 are mapped but not saved
		session := filepath.Join(cfg.SaveDir, node.SessionDir, node.SessionFile)
		_, stop := runEngineNode(t, cfg, "", 0, 7, 7, func(i int) {
			if i == 5 {
				waitFor(t, "the periodic session save", 20*time.Second, func() bool { _, err := os.Stat(session); return err == nil })
			}
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		cfg.SessionSaveEvery = 0
		checkResumed(t, cfg, 5, want)
	})
}

// checkResumed starts a node from cfg.SaveDir's session, which holds the
// first cut frames, feeds it the rest and compares its poses with want.
func checkResumed(t *testing.T, cfg node.Config, cut int, want []any) {
	t.Helper()
	total := len(want)
	if _, err := os.Stat(filepath.Join(cfg.SaveDir, node.SessionDir, node.SessionFile)); err != nil {
		t.Fatal(err)
	}
	second, stopSecond := runEngineNode(t, cfg, cfg.SaveDir, cut, total, total)
	got := second.Messages("/lbm/pose")
	if err := stopSecond(); err != nil {
		t.Fatal(err)
	}
	if len(got) != total-cut {
		t.Fatalf("the resumed node published %d poses for %d frames", len(got), total-cut)
	}
	for i, m := range got {
		g, w := m.(*geometry_msgs.PoseStamped), want[cut+i].(*geometry_msgs.PoseStamped)
		if !g.Header.Stamp.Equal(w.Header.Stamp) {
			t.Fatalf("pose %d stamped %v, uninterrupted %v", cut+i, g.Header.Stamp, w.Header.Stamp)
		}
		gp, wp := g.Pose, w.Pose
		for _, d := range [][2]float64{
			{gp.Position.X, wp.Position.X}, {gp.Position.Y, wp.Position.Y}, {gp.Position.Z, wp.Position.Z},
			{gp.Orientation.X, wp.Orientation.X}, {gp.Orientation.Y, wp.Orientation.Y},
			{gp.Orientation.Z, wp.Orientation.Z}, {gp.Orientation.W, wp.Orientation.W},
		} {
			if math.Abs(d[0]-d[1]) > 1e-6*math.Max(math.Abs(d[1]), 1e-3) {
				t.Fatalf("pose %d after resume %+v, uninterrupted %+v", cut+i, gp, wp)
			}
		}
	}
	path := second.Last("/lbm/path").(*nav_msgs.Path)
	if path.Poses[0].Pose != want[0].(*geometry_msgs.PoseStamped).Pose {
		t.Fatal("the resumed path does not start with the saved trajectory")
	}
}

// TestNodeResumeRefusals: --resume from a folder without a session, or from
// a session of other engine settings, fails before the node runs.
func TestNodeResumeRefusals(t *testing.T) {
	cfg := goldenNodeConfig(t)
	first, stop := runEngineNode(t, cfg, "", 0, 4, 4)
	if _, err := first.Call("/lbm/save_session"); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir string
		set       func(*node.Config)
		want      string
	}{
		{"no session", t.TempDir(), nil, "no such file"},
		{"other sliding window", cfg.SaveDir, func(c *node.Config) { c.Engine.SlidingWindow = 5 }, "sliding_window"},
		{"other voxel size", cfg.SaveDir, func(c *node.Config) { c.MapVoxel *= 2 }, "voxel size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			if tc.set != nil {
				tc.set(&c)
			}
			n, err := node.New(node.Options{Config: c, Transport: nodetest.New("/lbm", nil), Log: slog.New(slog.DiscardHandler),
				NewStream: func(context.Context, node.Config) (engine.Stream, error) { t.Fatal("started afresh"); return nil, nil },
				Resume:    tc.dir,
				ResumeStream: func(ctx context.Context, c node.Config, r io.Reader) (engine.Stream, error) {
					return engine.Resume(ctx, c.Engine, cpuFactory, r, nil)
				}})
			if err != nil {
				t.Fatal(err)
			}
			err = n.Run(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// A session saved while phase 1 holds frames keeps their headers: the
// resumed node publishes their results under their own frame ids (the
// pipeline's Cut lists the held frames; Config.Held gives them back).
func TestNodeSessionKeepsHeldFramesHeaders(t *testing.T) {
	cfg := goldenNodeConfig(t)
	cfg.SaveDir = t.TempDir()
	tr := nodetest.New("/lbm", nil)
	n, err := node.New(node.Options{Config: cfg, Transport: tr, Log: slog.New(slog.DiscardHandler),
		NewStream: func(ctx context.Context, c node.Config) (engine.Stream, error) {
			return engine.New(ctx, c.Engine, cpuFactory, nil)
		}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runNode(t, n, tr)
	// two of the three scale frames: the engine holds both, without results
	for i, id := range []string{"camA", "camB"} {
		if err := tr.Deliver("/image", frame(i, 70, 42, id), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tr.Call("/lbm/save_session"); err != nil {
		t.Fatal(err)
	}
	if got := len(tr.Messages("/lbm/depth")); got != 0 {
		t.Fatalf("%d depth images before phase 1 ran: the frames were not held", got)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	resumed, stopResumed := runEngineNode(t, cfg, cfg.SaveDir, 2, 3, 3)
	defer stopResumed()
	depths := resumed.Messages("/lbm/depth")
	if len(depths) != 3 {
		t.Fatalf("the resumed node published %d depth images, want 3", len(depths))
	}
	for i, want := range []string{"camA", "camB", "cam"} {
		if d := depths[i].(*sensor_msgs.Image); d.Header.FrameId != want || !d.Header.Stamp.Equal(stampOf(i)) {
			t.Errorf("depth %d in %q at %v, want %q at %v", i, d.Header.FrameId, d.Header.Stamp, want, stampOf(i))
		}
	}
}

// TestNodeLocalizationKeepsTheMap: a node resumed from a saved session with
// localization on tracks and publishes the new frames (poses, path) but its
// map and its engine's KV cache stay the saved ones (the frames run as
// non-keyframes, so no ~cloud); resumed without it, the same frames grow
// both.
func TestNodeLocalizationKeepsTheMap(t *testing.T) {
	cfg := goldenNodeConfig(t)
	cfg.SaveDir = t.TempDir()
	cfg.MapVoxel = 0.001
	first, stop := runEngineNode(t, cfg, "", 0, 7, 7)
	if _, err := first.Call("/lbm/save_session"); err != nil {
		t.Fatal(err)
	}
	saved := first.Last("/lbm/map").(*sensor_msgs.PointCloud2).Width
	savedKV := diagValue(waitDiag(t, first, map[string]string{"engine_frames_in": "7"}), "kv_frame_count")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// the map's points, the poses published and the engine's committed
	// frames after 5 more frames
	mapAfter := func(localize bool) (uint32, int, string) {
		c := cfg
		c.Localization = localize
		tr, stop := runEngineNode(t, c, cfg.SaveDir, 7, 12, 12)
		kv := diagValue(waitDiag(t, tr, map[string]string{"engine_frames_in": "12"}), "kv_frame_count")
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		return tr.Last("/lbm/map").(*sensor_msgs.PointCloud2).Width, len(tr.Messages("/lbm/pose")), kv
	}
	kept, poses, kv := mapAfter(true)
	if kept != saved || saved == 0 || poses != 5 {
		t.Fatalf("localization: the map has %d points after 5 more frames (%d poses published), the saved one %d", kept, poses, saved)
	}
	if kv != savedKV || savedKV == "" || savedKV == "0" {
		t.Fatalf("localization: the engine's cache holds %s frames after 5 more frames, the saved one %s", kv, savedKV)
	}
	if grown, _, kv := mapAfter(false); grown <= saved || kv == savedKV {
		t.Fatalf("without localization the map has %d points and the cache %s frames after 5 more frames, the saved ones %d and %s: the test shows nothing",
			grown, kv, saved, savedKV)
	}
}

// TestNodeLoadMap: ~load_map loads the session saved in save_dir into a
// running node with localization on. A missing or truncated session is
// refused and changes nothing; the saved one brings the map, the path and
// the engine's cache back, and the next frames publish poses while the map
// and the cache stay the loaded ones.
func TestNodeLoadMap(t *testing.T) {
	cfg := goldenNodeConfig(t)
	cfg.SaveDir = t.TempDir()
	cfg.MapVoxel = 0.001
	first, stop := runEngineNode(t, cfg, "", 0, 7, 7)
	if _, err := first.Call("/lbm/save_session"); err != nil {
		t.Fatal(err)
	}
	saved := first.Last("/lbm/map").(*sensor_msgs.PointCloud2).Width
	savedKV := diagValue(waitDiag(t, first, map[string]string{"engine_frames_in": "7"}), "kv_frame_count")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if saved == 0 || savedKV == "" || savedKV == "0" {
		t.Fatalf("the saved session holds %d points and %s cached frames", saved, savedKV)
	}

	c := cfg
	c.Localization = true
	c.SaveDir = t.TempDir()
	tr := nodetest.New("/lbm", nil)
	n, err := node.New(node.Options{Config: c, Transport: tr, Log: slog.New(slog.DiscardHandler),
		NewStream: func(ctx context.Context, c node.Config) (engine.Stream, error) {
			return engine.New(ctx, c.Engine, cpuFactory, nil)
		},
		ResumeStream: func(ctx context.Context, c node.Config, r io.Reader) (engine.Stream, error) {
			return engine.Resume(ctx, c.Engine, cpuFactory, r, nil)
		}})
	if err != nil {
		t.Fatal(err)
	}
	stop = runNode(t, n, tr)
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()

	// nothing saved there
	if msg, err := tr.Call("/lbm/load_map"); err == nil || !strings.Contains(err.Error(), "no saved session") {
		t.Fatalf("load_map from an empty save_dir: %q %v", msg, err)
	}
	// a truncated session
	whole, err := os.ReadFile(filepath.Join(cfg.SaveDir, node.SessionDir, node.SessionFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(c.SaveDir, node.SessionDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.SaveDir, node.SessionDir, node.SessionFile), whole[:len(whole)-100], 0o644); err != nil {
		t.Fatal(err)
	}
	if msg, err := tr.Call("/lbm/load_map"); err == nil || !strings.Contains(err.Error(), "ends early") {
		t.Fatalf("load_map of a truncated session: %q %v", msg, err)
	}
	if d := waitDiag(t, tr, map[string]string{"engine_frames_in": "0"}); diagValue(d, "kv_frame_count") != "0" {
		t.Fatalf("a refused load changed the engine: kv_frame_count %s", diagValue(d, "kv_frame_count"))
	}

	// the saved session, named by the save_dir parameter
	tr.SetParam("save_dir", cfg.SaveDir)
	msg, err := tr.Call("/lbm/load_map")
	if err != nil || !strings.Contains(msg, "7 poses") || !strings.Contains(msg, "localizing") {
		t.Fatalf("load_map: %q %v", msg, err)
	}
	waitFor(t, "the loaded map", 10*time.Second, func() bool {
		m, _ := tr.Last("/lbm/map").(*sensor_msgs.PointCloud2)
		p, _ := tr.Last("/lbm/path").(*nav_msgs.Path)
		return m != nil && m.Width == saved && p != nil && len(p.Poses) == 7
	})
	waitDiag(t, tr, map[string]string{"engine_frames_in": "7", "kv_frame_count": savedKV})

	for i := 7; i < 12; i++ {
		if err := tr.Deliver("/image", frame(i, 70, 42, "cam"), nil); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the path to hold the loaded and the new poses", 30*time.Second, func() bool {
		p, _ := tr.Last("/lbm/path").(*nav_msgs.Path)
		return p != nil && len(p.Poses) == 12
	})
	waitDiag(t, tr, map[string]string{"engine_frames_in": "12", "kv_frame_count": savedKV})
	if got := len(tr.Messages("/lbm/pose")); got != 5 {
		t.Fatalf("%d poses published after the load, want 5", got)
	}
	// the map as ~save_map writes it once every frame is mapped
	out := t.TempDir()
	tr.SetParam("save_dir", out)
	if _, err := tr.Call("/lbm/save_map"); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(out, "map.ply"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pts, _, err := mapio.ReadPLY(f)
	if err != nil || len(pts) != int(saved) {
		t.Fatalf("map.ply after 5 localized frames: %d points (%v), the loaded map %d", len(pts), err, saved)
	}
}
