//go:build ros2

package test

// The real ROS 2 Jazzy of ../shared/tools/ros2-jazzy (the ros2 CLI, rclpy,
// launch, rosbag2, tf2; rmw_cyclonedds_cpp and rmw_fastrtps_cpp) as the judge
// of the node's ROS 2 claims. Everything here runs inside the test's
// netns-run.sh namespace (inNetns); a missing install is a failure, never a
// skip: test/install-deps.sh installs it.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/internal/shared"
	"github.com/lingbotmap/lingbotmap/internal/syncbuf"
)

// The RMWs the shared Jazzy has; rmw_fastrtps_cpp is Jazzy's default.
const (
	rmwCyclone = "rmw_cyclonedds_cpp"
	rmwFastDDS = "rmw_fastrtps_cpp"
)

var (
	jazzyOnce sync.Once
	jazzyBase []string
	jazzyErr  error
)

// jazzy is the environment of Jazzy's programs for one test and one RMW.
type jazzy struct {
	t   *testing.T
	env []string
	dir string // the test's ROS_HOME and ROS_LOG_DIR live here
}

// jazzyEnv returns Jazzy's environment (what env.sh sets) with rmw as the RMW
// and a private ROS_HOME and log folder. It must be called inside the
// namespace (after inNetns returned true). A ros2 daemon that a command
// spawned is stopped when the test ends.
func jazzyEnv(t *testing.T, rmw string) *jazzy {
	t.Helper()
	if os.Getenv(envNetns) != "1" {
		t.Fatal("jazzyEnv outside netns-run.sh: call inNetns first")
	}
	jazzyOnce.Do(func() { jazzyBase, jazzyErr = loadJazzyEnv() })
	if jazzyErr != nil {
		t.Fatalf("the real ROS 2 Jazzy (../shared/tools/ros2-jazzy, installed by test/install-deps.sh): %v", jazzyErr)
	}
	dir := t.TempDir()
	env := make([]string, 0, len(jazzyBase)+5)
	for _, kv := range jazzyBase {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "RMW_IMPLEMENTATION", "ROS_HOME", "ROS_LOG_DIR", "CYCLONEDDS_URI":
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "RMW_IMPLEMENTATION="+rmw, "ROS_HOME="+filepath.Join(dir, "home"),
		"ROS_LOG_DIR="+filepath.Join(dir, "log"), "CYCLONEDDS_URI="+cycloneURI,
		"PYTHONUNBUFFERED=1")
	j := &jazzy{t: t, env: env, dir: dir}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = j.command(ctx, "ros2", "daemon", "stop").Run()
	})
	return j
}

// loadJazzyEnv sources env.sh in bash and returns the environment it leaves.
func loadJazzyEnv() ([]string, error) {
	envSh, err := shared.Path("tools", "ros2-jazzy", "env.sh")
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd := exec.Command("bash", "-c", `source "$1" >&2 && env -0`, "bash", envSh)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("sourcing %s: %w\n%s", envSh, err, stderr.String())
	}
	var env []string
	for _, kv := range strings.Split(string(out), "\x00") {
		if kv != "" {
			env = append(env, kv)
		}
	}
	return env, nil
}

// Getenv returns a variable of Jazzy's environment.
func (j *jazzy) Getenv(key string) string {
	for i := len(j.env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(j.env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// Python is the interpreter for rclpy scripts ($ROS2_PYTHON).
func (j *jazzy) Python() string {
	if p := j.Getenv("ROS2_PYTHON"); p != "" {
		return p
	}
	return "/usr/bin/python3"
}

// command prepares a program (ros2, python3, a node) in Jazzy's environment,
// in its own process group so that the SIGINT of stop reaches its children.
func (j *jazzy) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, j.lookPath(name), args...)
	cmd.Env = j.env
	cmd.Dir = j.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// lookPath finds a program on Jazzy's PATH (exec.Command would search the
// test process's own).
func (j *jazzy) lookPath(name string) string {
	if strings.Contains(name, "/") {
		return name
	}
	for _, d := range filepath.SplitList(j.Getenv("PATH")) {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return name
}

// run runs a program to its end within timeout and returns what it printed
// (stdout and stderr together) and its error; a time-out is an error that
// says so.
func (j *jazzy) run(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := j.command(ctx, name, args...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return string(out), fmt.Errorf("%s %s: no end within %v: %w", name, strings.Join(args, " "), timeout, ctx.Err())
	}
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return string(out), nil
}

// ros2 runs the ros2 CLI and fails the test unless it succeeds.
func (j *jazzy) ros2(timeout time.Duration, args ...string) string {
	j.t.Helper()
	out, err := j.run(timeout, "ros2", args...)
	if err != nil {
		j.t.Fatalf("%v\n%s", err, out)
	}
	return out
}

// ros2Until repeats a ros2 command until its output contains want (the graph
// is discovered asynchronously), failing with the last output after timeout.
func (j *jazzy) ros2Until(timeout time.Duration, want string, args ...string) string {
	j.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left < time.Second {
			left = time.Second
		}
		out, err := j.run(left, "ros2", args...)
		if err == nil && strings.Contains(out, want) {
			return out
		}
		if time.Now().After(deadline) {
			j.t.Fatalf("ros2 %s: no %q within %v (last error %v):\n%s", strings.Join(args, " "), want, timeout, err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// jazzyProc is a program left running in the background.
type jazzyProc struct {
	name string
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	done chan error
}

// start starts a program in the background; it is stopped (SIGINT to its
// process group, then SIGKILL) when the test ends, and its output is logged
// if the test failed.
func (j *jazzy) start(name string, args ...string) *jazzyProc {
	j.t.Helper()
	cmd := j.command(context.Background(), name, args...)
	p := &jazzyProc{name: name + " " + strings.Join(args, " "), cmd: cmd, out: &syncbuf.Buffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		j.t.Fatalf("starting %s: %v", p.name, err)
	}
	go func() { p.done <- cmd.Wait() }()
	j.t.Cleanup(func() {
		p.stop(5 * time.Second)
		if j.t.Failed() {
			j.t.Logf("%s printed:\n%s", p.name, p.out.String())
		}
	})
	return p
}

// stop sends SIGINT to the process group and waits up to grace before
// SIGKILL; it returns the program's exit error.
func (p *jazzyProc) stop(grace time.Duration) error {
	select {
	case err := <-p.done:
		p.done <- err
		return err
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT)
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		err := <-p.done
		p.done <- err
		return errors.Join(err, fmt.Errorf("%s: no end within %v of SIGINT", p.name, grace))
	}
}

// waitOutput waits until the program has printed want, failing after timeout
// or when it ends first.
func (p *jazzyProc) waitOutput(t *testing.T, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for !strings.Contains(p.out.String(), want) {
		select {
		case err := <-p.done:
			p.done <- err
			if strings.Contains(p.out.String(), want) {
				return
			}
			t.Fatalf("%s ended (%v) before printing %q:\n%s", p.name, err, want, p.out.String())
		case <-deadline:
			t.Fatalf("%s: no %q within %v:\n%s", p.name, want, timeout, p.out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestJazzyHarness proves the harness against the real Jazzy: an rclpy
// talker under each RMW is heard by the ros2 CLI, and the node's pose topic
// is listed with its type.
func TestJazzyHarness(t *testing.T) {
	if !inNetns(t) {
		return
	}
	startROS2Node(t, ros2NodeArgs(t, "lingbotmap", 154)...)
	for _, rmw := range []string{rmwCyclone, rmwFastDDS} {
		j := jazzyEnv(t, rmw)
		j.ros2Until(60*time.Second, "/lingbotmap/pose [geometry_msgs/msg/PoseStamped]", "topic", "list", "-t", "--no-daemon")
		talker := j.start("ros2", "topic", "pub", "-r", "5", "/harness_"+rmw, "std_msgs/msg/String", "{data: from_jazzy}")
		echo := j.ros2(30*time.Second, "topic", "echo", "--once", "/harness_"+rmw, "std_msgs/msg/String")
		if !strings.Contains(echo, "data: from_jazzy") {
			t.Fatalf("%s: ros2 topic echo got:\n%s", rmw, echo)
		}
		_ = talker.stop(10 * time.Second) // SIGINT ends it; its status says nothing more
	}
}
