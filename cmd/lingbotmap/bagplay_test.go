package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"

	"github.com/lingbotmap/lingbotmap/msgs/bag"
)

func TestBagPlayFlags(t *testing.T) {
	var got *bagPlayOptions
	root := newRootCmd()
	// As run() hands them on: protectROSArgs marks the ROS 2 block.
	root.SetArgs(protectROSArgs([]string{"bag", "play", "--topic", "/cam", "--rate", "2.5", "--delay", "300ms", "f.mcap",
		"--ros-args", "-r", "__node:=p", "-r", "/cam:=/x"}))
	for _, c := range root.Commands() {
		if c.Name() == "bag" {
			for _, p := range c.Commands() {
				if p.Name() == "play" {
					c.RemoveCommand(p)
				}
			}
			c.AddCommand(newBagPlayCmdWith(func(_ context.Context, o *bagPlayOptions, _ io.Writer) error { got = o; return nil }))
		}
	}
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if got.file != "f.mcap" || got.play.Topic != "/cam" || got.play.Rate != 2.5 || got.play.Delay != 300*time.Millisecond ||
		!reflect.DeepEqual(got.rosArgs, []string{"--ros-args", "-r", "__node:=p", "-r", "/cam:=/x"}) {
		t.Fatalf("parsed %+v", got)
	}

	for _, args := range [][]string{
		{},                       // no file
		{"--rate", "0", "f"},     // rate
		{"--delay", "-1s", "f"},  // delay
		{"f.mcap", "other.mcap"}, // stray argument
	} {
		cmd := newBagPlayCmdWith(func(context.Context, *bagPlayOptions, io.Writer) error { t.Fatal("ran despite bad flags"); return nil })
		cmd.SetArgs(args)
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		var ec *exitCodeError
		if err := cmd.Execute(); !errors.As(err, &ec) || ec.code != exitUsage {
			t.Errorf("args %q: error %v, want a usage error", args, err)
		}
	}
}

// ROS 2 arguments before the file are not flags of play.
func TestBagPlayRosArgsFirst(t *testing.T) {
	cmd := newBagPlayCmdWith(func(context.Context, *bagPlayOptions, io.Writer) error { t.Fatal("ran"); return nil })
	cmd.SetArgs([]string{"--ros-args", "-r", "a:=b", "f.mcap"})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	if err := cmd.Execute(); err == nil {
		t.Fatal("--ros-args before the bag file accepted")
	}
}

// Without the bag, play stops before touching the network.
func TestBagPlayMissingFile(t *testing.T) {
	o := &bagPlayOptions{file: filepath.Join(t.TempDir(), "none.mcap")}
	if err := runBagPlay(context.Background(), o, io.Discard); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("missing bag: %v", err)
	}
}

func TestProtectROSArgs(t *testing.T) {
	for _, c := range []struct{ in, want []string }{
		{[]string{"node", "--ros", "2"}, []string{"node", "--ros", "2"}},
		{[]string{"node", "--queue-policy=all", "--ros-args", "-p", "a:=1"}, []string{"node", "--queue-policy=all", "--", "--ros-args", "-p", "a:=1"}},
		{[]string{"node", "--", "x", "--ros-args"}, []string{"node", "--", "x", "--ros-args"}},
		// ros2 run lingbotmap lingbotmap --ros-args …: the ROS 2 node
		{[]string{"--ros-args", "-r", "__node:=m"}, []string{"node", "--ros=2", "--", "--ros-args", "-r", "__node:=m"}},
		{[]string{"--ros-args"}, []string{"node", "--ros=2", "--", "--ros-args"}},
	} {
		if got := protectROSArgs(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("protectROSArgs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// bag play checks its file before it joins the ROS 2 graph: a ROS 1 bag is
// refused with the way to play it (rosbag play), a file that is no MCAP
// with the reason, and neither gets as far as the middleware (in a build
// without ROS 2 the error would otherwise be the missing middleware's).
func TestBagPlayChecksTheFileFirst(t *testing.T) {
	dir := t.TempDir()
	ros1 := filepath.Join(dir, "cam.bag")
	w, err := bag.Create(ros1)
	if err != nil {
		t.Fatal(err)
	}
	img := &sensor_msgs.Image{Header: std_msgs.Header{Stamp: time.Unix(1700000000, 0)}, Width: 2, Height: 1, Encoding: "mono8", Step: 2, Data: []byte{1, 2}}
	if err := w.Write("/camera/image_raw", img.Header.Stamp, img); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	code, msg := runCLI(t, "bag", "play", ros1)
	if code != exitUsage || !strings.Contains(msg, "is a ROS 1 bag, not a ROS 2 bag (MCAP, .db3 or a rosbag2 bag directory): play it with rosbag play") {
		t.Errorf("a ROS 1 bag: exit %d, stderr %q", code, msg)
	}
	junk := filepath.Join(dir, "junk.mcap")
	if err := os.WriteFile(junk, []byte("not a bag at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, msg = runCLI(t, "bag", "play", junk)
	if code != exitError || !strings.Contains(msg, "not an MCAP file") {
		t.Errorf("junk: exit %d, stderr %q", code, msg)
	}
}
