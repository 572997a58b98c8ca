package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
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
	} {
		if got := protectROSArgs(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("protectROSArgs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
