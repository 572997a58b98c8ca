package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/node"
	"github.com/lingbotmap/lingbotmap/node/ros1"
)

// --ros picks the transport: 1 is goroslib with the ROS environment and the
// x:=y arguments; 2 is refused clearly until a ROS 2 transport is built in.
func TestNodeROSVersion(t *testing.T) {
	t.Setenv("ROS_MASTER_URI", "http://127.0.0.1:11999")
	t.Setenv("ROS_NAMESPACE", "/robot")
	t.Setenv("ROS_HOSTNAME", "")
	t.Setenv("ROS_IP", "")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := node.DefaultConfig()

	tr, err := newTransport("1", []string{"image:=/camera/image_raw", "__name:=mapper"}, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tr.(*ros1.Transport); !ok {
		t.Fatalf("--ros 1 gave a %T", tr)
	}
	if tr.FullName() != "/robot/mapper" || tr.Resolve("image") != "/camera/image_raw" || tr.Resolve("~pose") != "/robot/mapper/pose" {
		t.Errorf("--ros 1: name %q, image %q, ~pose %q", tr.FullName(), tr.Resolve("image"), tr.Resolve("~pose"))
	}
	if _, err := newTransport("1", []string{"stray"}, cfg, log); err == nil || !strings.Contains(err.Error(), "stray") {
		t.Errorf("a stray argument: %v", err)
	}
	if _, err := newTransport("2", nil, cfg, log); err == nil || !strings.Contains(err.Error(), "not available in this build") {
		t.Errorf("--ros 2: %v", err)
	}
	if _, err := newTransport("3", nil, cfg, log); err == nil || !strings.Contains(err.Error(), `"3"`) {
		t.Errorf("--ros 3: %v", err)
	}
	if code := run(context.Background(), []string{"node", "--ros=2"}); code != exitUsage {
		t.Errorf("lingbotmap node --ros=2 exited %d, want %d", code, exitUsage)
	}
}
