package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/lingbotmap/lingbotmap/node/bagplay"
	"github.com/lingbotmap/lingbotmap/node/ros2"
)

// bagPlayOptions holds the flags of `lingbotmap bag play`.
type bagPlayOptions struct {
	file    string
	play    bagplay.Options
	rosArgs []string // everything from --ros-args on
}

func newBagPlayCmd() *cobra.Command { return newBagPlayCmdWith(runBagPlay) }

// newBagPlayCmdWith lets tests check flag parsing without running the command.
func newBagPlayCmdWith(runF func(ctx context.Context, o *bagPlayOptions, out io.Writer) error) *cobra.Command {
	o := &bagPlayOptions{play: bagplay.DefaultOptions()}
	cmd := &cobra.Command{
		Use:   "play BAG [flags] [--ros-args ...]",
		Short: "Publish the camera topic of a ROS 2 bag (MCAP, .db3 or a bag directory) over ROS 2",
		Long: `play publishes the image topic (sensor_msgs/msg/Image or CompressedImage) of a
ROS 2 bag over ROS 2 (DDS): an .mcap or .db3 file, or a rosbag2 bag directory
(metadata.yaml and its split files, mcap or sqlite3 storage, no, file or
message zstd compression). Each message keeps its recorded stamp, at its
recorded pace (--rate scales it), as ros2 bag play does, so a replay needs no
ROS 2 installation. The publisher is reliable unless the bag recorded a
best-effort one. ROS 2 arguments follow --ros-args (-r /camera/image_raw:=/cam,
-r __node:=player, -r __ns:=/ns) and ROS_DOMAIN_ID and
ROS_AUTOMATIC_DISCOVERY_RANGE apply. Needs a binary built with -tags ros2.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 || args[0] == "--ros-args" {
				return &exitCodeError{code: exitUsage, err: errors.New("play needs the bag file")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.file, o.rosArgs = args[0], args[1:]
			if len(o.rosArgs) > 0 && o.rosArgs[0] == "--" { // protectROSArgs's mark
				o.rosArgs = o.rosArgs[1:]
			}
			if len(o.rosArgs) > 0 && o.rosArgs[0] != "--ros-args" {
				return &exitCodeError{code: exitUsage, err: fmt.Errorf("unexpected arguments %q after the bag file (ROS 2 arguments start with --ros-args)", o.rosArgs)}
			}
			if !(o.play.Rate > 0) || o.play.Rate > 1e6 {
				return &exitCodeError{code: exitUsage, err: fmt.Errorf("'rate' must be a positive speed factor, not %g", o.play.Rate)}
			}
			if o.play.Linger < 0 {
				return &exitCodeError{code: exitUsage, err: fmt.Errorf("'linger' must not be negative, not %v", o.play.Linger)}
			}
			if o.play.Delay < 0 {
				return &exitCodeError{code: exitUsage, err: fmt.Errorf("'delay' must not be negative, not %v", o.play.Delay)}
			}
			return runF(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	// Flags come before FILE, so that --ros-args and what follows reach the
	// ROS 2 argument parser untouched.
	f.SetInterspersed(false)
	f.StringVar(&o.play.Topic, "topic", "", "image topic of the bag (default: its only image topic)")
	f.Float64Var(&o.play.Rate, "rate", o.play.Rate, "speed factor of the replay (2 = twice as fast)")
	f.DurationVar(&o.play.Delay, "delay", o.play.Delay, "wait this long after advertising, for subscribers to discover the player")
	f.DurationVar(&o.play.Linger, "linger", o.play.Linger, "stay this long after the last message before leaving the graph, so that readers get it whole")
	return cmd
}

func runBagPlay(ctx context.Context, o *bagPlayOptions, out io.Writer) error {
	if _, err := os.Stat(o.file); err != nil {
		return fmt.Errorf("bag: %w", err)
	}
	// The bag is opened and its topic picked before the player joins the
	// ROS 2 graph, so that a wrong file fails at once and leaves no trace.
	if err := bagplay.Check(o.file, o.play); err != nil {
		if errors.Is(err, bagplay.ErrROS1Bag) {
			return &exitCodeError{code: exitUsage, err: err}
		}
		return fmt.Errorf("bag: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	a, rest, err := ros2.ParseArgs(o.rosArgs, os.Getenv, "lingbotmap_bag_play")
	if err != nil {
		return &exitCodeError{code: exitUsage, err: err}
	}
	if len(rest) > 0 {
		return &exitCodeError{code: exitUsage, err: fmt.Errorf("unexpected arguments %q", rest)}
	}
	t, err := ros2.New(a, log)
	if err != nil {
		return err
	}
	if err := t.Connect(ctx); err != nil {
		return err
	}
	defer t.Close()
	o.play.Log = log
	start := time.Now()
	res, err := bagplay.Play(ctx, o.file, t, o.play)
	if err != nil && res.Published == 0 {
		return err
	}
	fmt.Fprintf(out, "published %d messages of %s in %.1f s", res.Published, res.Topic, time.Since(start).Seconds())
	if res.Skipped > 0 {
		fmt.Fprintf(out, "; skipped %d that did not decode (first: %v)", res.Skipped, res.FirstErr)
	}
	fmt.Fprintln(out)
	return err // a bag read in part (exit 4) after what was published
}
