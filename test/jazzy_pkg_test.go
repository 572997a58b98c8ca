//go:build ros2

package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/internal/shared"
)

// TestJazzyPackage builds the repository as the ROS 2 package lingbotmap
// with colcon against the real Jazzy (src/lingbotmap of a fresh workspace,
// a link to this checkout; Go's build cache makes it quick), then brings the
// node up the two ways a ROS 2 user does: `ros2 run lingbotmap lingbotmap
// --ros-args …` and `ros2 launch lingbotmap mapping.launch.xml`, each seen
// by `ros2 node list` under its new name, with the CLI on rmw_cyclonedds_cpp
// and on rmw_fastrtps_cpp; and `ros2 launch lingbotmap replay.launch.xml`
// plays an MCAP into the node, whose pose `ros2 topic echo` receives.
func TestJazzyPackage(t *testing.T) {
	if !inNetns(t) {
		return
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not on PATH: %v", err)
	}
	j := jazzyEnv(t, rmwCyclone)
	ws := filepath.Join(j.dir, "ws")
	if err := os.MkdirAll(filepath.Join(ws, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(repo, filepath.Join(ws, "src", "lingbotmap")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err := j.run(5*time.Minute, "colcon", "--log-base", filepath.Join(ws, "log"), "build",
		"--base-paths", filepath.Join(ws, "src"), "--build-base", filepath.Join(ws, "build"),
		"--install-base", filepath.Join(ws, "install"), "--event-handlers", "console_direct+",
		"--cmake-args", "-DPython3_EXECUTABLE="+j.Python(), "-DGO_EXECUTABLE="+goTool)
	if err != nil {
		t.Fatalf("colcon build: %v\n%s", err, out)
	}
	t.Logf("colcon build took %v", time.Since(start).Round(100*time.Millisecond))
	share := filepath.Join(ws, "install", "lingbotmap", "share", "lingbotmap")
	for _, f := range []string{
		filepath.Join(ws, "install", "lingbotmap", "lib", "lingbotmap", "lingbotmap"),
		filepath.Join(share, "launch", "mapping.launch.xml"),
		filepath.Join(share, "launch", "replay.launch.xml"),
		filepath.Join(share, "launch", "lingbotmap_ros2.rviz"),
		filepath.Join(share, "config", "lingbotmap.yaml"),
		filepath.Join(share, "package.xml"),
		filepath.Join(ws, "install", "lingbotmap", "share", "ament_index", "resource_index", "packages", "lingbotmap"),
	} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("colcon build did not install %s: %v", f, err)
		}
	}
	// The workspace's environment on top of Jazzy's, as `source
	// install/setup.bash` leaves it.
	overlay := jazzyOverlay(t, j, filepath.Join(ws, "install", "setup.bash"))
	if got := strings.TrimSpace(overlay.ros2(30*time.Second, "pkg", "prefix", "lingbotmap")); got != filepath.Join(ws, "install", "lingbotmap") {
		t.Fatalf("ros2 pkg prefix lingbotmap = %q", got)
	}

	weights, err := shared.Path("golden", "weights.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	// The CLI on Jazzy's default RMW too.
	fastOverlay := &jazzy{t: t, env: append(append([]string{}, overlay.env...), "RMW_IMPLEMENTATION="+rmwFastDDS), dir: j.dir}
	run := overlay.start("ros2", "run", "lingbotmap", "lingbotmap", "--ros-args", "-r", "__node:=pkg_run",
		"-p", "weights:="+weights, "-p", "image_width:=154")
	overlay.ros2Until(60*time.Second, "/pkg_run", "node", "list", "--no-daemon")
	fastOverlay.ros2Until(60*time.Second, "/pkg_run", "node", "list", "--no-daemon")
	if err := run.stop(20 * time.Second); err != nil {
		t.Fatalf("ros2 run: %v\n%s", err, run.out.String())
	}

	launch := overlay.start("ros2", "launch", "lingbotmap", "mapping.launch.xml", "node_name:=pkg_launch",
		"image:=/cam/image_raw", "save_dir:="+filepath.Join(j.dir, "map"))
	overlay.ros2Until(60*time.Second, "/pkg_launch", "node", "list", "--no-daemon")
	fastOverlay.ros2Until(60*time.Second, "/pkg_launch", "node", "list", "--no-daemon")
	overlay.ros2Until(30*time.Second, "/cam/image_raw [sensor_msgs/msg/Image]", "topic", "list", "-t", "--no-daemon")
	if err := launch.stop(20 * time.Second); err != nil {
		t.Fatalf("ros2 launch: %v\n%s", err, launch.out.String())
	}
	if !strings.Contains(launch.out.String(), "process has finished cleanly") {
		t.Errorf("ros2 launch: the node did not end cleanly:\n%s", launch.out.String())
	}

	// replay.launch.xml: the installed binary plays an MCAP into the node
	// (rviz2 is not in this install).
	courthouse, err := shared.Path("data", "courthouse")
	if err != nil {
		t.Fatal(err)
	}
	bag := filepath.Join(j.dir, "frames.mcap")
	runOK(t, 60*time.Second, ros2Binary(t), "bag", "--format", "mcap", "--images", courthouse, "--first-k", "10",
		"--rate", "10", "--out", bag)
	echo := overlay.start("ros2", "topic", "echo", "--once", "/lingbotmap/pose", "geometry_msgs/msg/PoseStamped")
	replay := overlay.start("ros2", "launch", "lingbotmap", "replay.launch.xml", "bag:="+bag, "rviz:=false",
		"save_dir:="+filepath.Join(j.dir, "map"))
	select {
	case err := <-echo.done:
		echo.done <- err
		if err != nil || !strings.Contains(echo.out.String(), "frame_id: map") {
			t.Fatalf("ros2 topic echo --once /lingbotmap/pose during replay.launch.xml: %v\n%s\nlaunch:\n%s", err, echo.out.String(), replay.out.String())
		}
	case <-time.After(120 * time.Second):
		t.Fatalf("no pose from replay.launch.xml within 120 s:\n%s", replay.out.String())
	}
	if err := replay.stop(30 * time.Second); err != nil {
		t.Fatalf("ros2 launch replay.launch.xml: %v\n%s", err, replay.out.String())
	}
	for _, want := range []string{"published 10 messages of /camera/image_raw", "[player-1]: process has finished cleanly",
		"[lingbotmap-2]: process has finished cleanly"} {
		if !strings.Contains(replay.out.String(), want) {
			t.Errorf("ros2 launch replay.launch.xml printed no %q:\n%s", want, replay.out.String())
		}
	}
}

// jazzyOverlay is j's environment with a colcon workspace's setup.bash
// sourced on top.
func jazzyOverlay(t *testing.T, j *jazzy, setup string) *jazzy {
	t.Helper()
	cmd := j.command(t.Context(), "bash", "-c", `source "$1" >&2 && env -0`, "bash", setup)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sourcing %s: %v\n%s", setup, err, stderr.String())
	}
	var env []string
	for _, kv := range strings.Split(string(out), "\x00") {
		if kv != "" {
			env = append(env, kv)
		}
	}
	return &jazzy{t: t, env: env, dir: j.dir}
}
