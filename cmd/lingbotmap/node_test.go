package main

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/node"
	"github.com/lingbotmap/lingbotmap/node/ros1"
)

// --ros picks the transport: 1 is goroslib with the ROS environment and the
// x:=y arguments; 2 is DDS, refused clearly by a binary built without the
// ros2 tag; without the flag, ROS_VERSION decides, else ROS 2.
func TestNodeROSVersion(t *testing.T) {
	t.Setenv("ROS_MASTER_URI", "http://127.0.0.1:11999")
	t.Setenv("ROS_NAMESPACE", "/robot")
	t.Setenv("ROS_HOSTNAME", "")
	t.Setenv("ROS_IP", "")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := node.DefaultConfig()

	tr, _, err := newTransport("1", []string{"image:=/camera/image_raw", "__name:=mapper"}, cfg, log, slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tr.(*ros1.Transport); !ok {
		t.Fatalf("--ros 1 gave a %T", tr)
	}
	if tr.FullName() != "/robot/mapper" || tr.Resolve("image") != "/camera/image_raw" || tr.Resolve("~pose") != "/robot/mapper/pose" {
		t.Errorf("--ros 1: name %q, image %q, ~pose %q", tr.FullName(), tr.Resolve("image"), tr.Resolve("~pose"))
	}
	if _, _, err := newTransport("1", []string{"stray"}, cfg, log, slog.LevelInfo); err == nil || !strings.Contains(err.Error(), "stray") {
		t.Errorf("a stray argument: %v", err)
	}
	if tr, _, err := newTransport("2", []string{"--ros-args", "-r", "__node:=mapper"}, cfg, log, slog.LevelInfo); err != nil {
		if !strings.Contains(err.Error(), "-tags ros2") {
			t.Errorf("--ros 2 without ROS 2 support: %v, want one naming the ros2 build tag", err)
		}
	} else if tr.FullName() != "/mapper" {
		t.Errorf("--ros 2: name %q, want /mapper", tr.FullName())
	}
	if _, _, err := newTransport("2", []string{"image:=/cam"}, cfg, log, slog.LevelInfo); err == nil || !strings.Contains(err.Error(), "image:=/cam") {
		t.Errorf("--ros 2 with a ROS 1 remap: %v", err)
	}
	for _, c := range []struct{ flag, env, want string }{{"1", "2", "1"}, {"", "1", "1"}, {"", "", "2"}} {
		if got := rosVersion(c.flag, func(string) string { return c.env }); got != c.want {
			t.Errorf("rosVersion(%q) with ROS_VERSION=%q = %q, want %q", c.flag, c.env, got, c.want)
		}
	}
	if _, _, err := newTransport("3", nil, cfg, log, slog.LevelInfo); err == nil || !strings.Contains(err.Error(), `"3"`) {
		t.Errorf("--ros 3: %v", err)
	}
	if code := run(context.Background(), []string{"node", "--ros=2"}); code != exitUsage {
		t.Errorf("lingbotmap node --ros=2 exited %d, want %d", code, exitUsage)
	}
}

// A node started with roslaunch's ROS 1 remaps but no ROS version speaks
// ROS 2 by default, and says how to choose ROS 1 instead of only calling
// the remaps unexpected. Found before any engine or middleware starts.
func TestNodeROS1RemapsWithoutVersion(t *testing.T) {
	t.Setenv("ROS_VERSION", "")
	code, msg := runCLI(t, "node", "--weights", filepath.Join(t.TempDir(), "none.safetensors"), "image:=/camera/image_raw", "__name:=mapper")
	if code != exitUsage || !strings.Contains(msg, "look like ROS 1 remaps") || !strings.Contains(msg, "add --ros 1") || !strings.Contains(msg, "--ros-args") {
		t.Errorf("exit %d, stderr %q", code, msg)
	}
}
