package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lingbotmap/lingbotmap/config"
	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/golden/replay"
	"github.com/lingbotmap/lingbotmap/node"
	"github.com/lingbotmap/lingbotmap/node/ros1"
	"github.com/lingbotmap/lingbotmap/node/ros2"
)

// nodeOptions are the node subcommand's own flags; the settings are in node.Config.
type nodeOptions struct {
	settings *config.Binding
	logLevel string
	ros      string // "1" (goroslib) or "2" (DDS); "" follows ROS_VERSION, else 2
	resume   string // a save_dir holding a session saved by ~save_session
}

func newNodeCmd() *cobra.Command {
	opts := &nodeOptions{}
	cmd := &cobra.Command{
		Use:   "node [--ros 1|2] [--config FILE] [--key=value ...] [from:=to ... | --ros-args ...]",
		Short: "Run the ROS mapping node (ROS 2 or ROS 1)",
		Long: `Run the LingBot-Map ROS node: subscribe to images, publish poses, path,
odometry, clouds, the map, depth, TF and /diagnostics; services reset, pause,
resume, save_map, save_session and load_map in the node's private namespace.
--resume DIR starts from the session save_session wrote into DIR; load_map
loads the one in save_dir into the running node.

--ros picks the middleware: 2 is ROS 2 over DDS (Cyclone DDS; needs a binary
built with -tags ros2), 1 is ROS 1 (goroslib). Without --ros the node follows
ROS_VERSION when a ROS environment sets it, else speaks ROS 2.

Settings (see config/lingbotmap.yaml) come from the built-in defaults, the
--config file, LINGBOTMAP_* environment variables (LINGBOTMAP_QUEUE_POLICY),
flags (--queue-policy) and then ROS parameters: ROS 2's --ros-args -p
queue_policy:=all and --params-file FILE, or ROS 1's private parameters
(~queue_policy).

ROS 2: --ros-args -r from:=to -r __node:=NAME -r __ns:=/NS -p key:=value
--params-file FILE, ROS_DOMAIN_ID, ROS_AUTOMATIC_DISCOVERY_RANGE and
ROS_LOCALHOST_ONLY are honoured. ROS 1: ROS_MASTER_URI, ROS_HOSTNAME/ROS_IP,
ROS_NAMESPACE and roslaunch's __name:=, __ns:=, __log:= and from:=to.`,
		Args: cobra.ArbitraryArgs,
	}
	cmd.Flags().StringVar(&opts.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	cmd.Flags().StringVar(&opts.resume, "resume", "", "start from the session that ~save_session saved into this save_dir (DIR/session/node.state)")
	cmd.Flags().StringVar(&opts.ros, "ros", "", "ROS version to speak: 2 (DDS) or 1 (goroslib); default: $ROS_VERSION, else 2")
	var bindErr error
	opts.settings, bindErr = node.BindFlags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if bindErr != nil {
			return bindErr
		}
		return runNode(cmd.Context(), opts, args)
	}
	return cmd
}

func runNode(ctx context.Context, opts *nodeOptions, args []string) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(opts.logLevel)); err != nil {
		return &exitCodeError{code: exitUsage, err: fmt.Errorf("--log-level %q: want debug, info, warn or error", opts.logLevel)}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	cfg, _, err := node.LoadConfig(opts.settings)
	if err != nil {
		return &exitCodeError{code: exitUsage, err: err}
	}
	tr, log, err := newTransport(rosVersion(opts.ros, os.Getenv), args, cfg, log, level)
	if err != nil {
		return &exitCodeError{code: exitUsage, err: err}
	}
	abort, release := secondSignal(ctx)
	defer release()
	n, err := node.New(node.Options{Config: cfg, Transport: tr, Log: log, NewStream: newNodeStream(log),
		Resume: opts.resume, ResumeStream: resumeNodeStream(log), Abort: abort})
	if err != nil {
		return &exitCodeError{code: exitUsage, err: err}
	}
	return n.Run(ctx)
}

// secondSignal is closed by a stop signal that comes after ctx ended (the
// first): the node then gives up the frames it was still mapping.
func secondSignal(ctx context.Context) (<-chan struct{}, func()) {
	abort, done := make(chan struct{}), make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
			return
		}
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, stopSignals()...)
		defer signal.Stop(ch)
		select {
		case <-ch:
			close(abort)
		case <-done:
		}
	}()
	return abort, func() { close(done) }
}

// rosVersion is the --ros flag, or ROS_VERSION (which ROS setup scripts
// export) when the flag is not given, or 2.
func rosVersion(flag string, getenv func(string) string) string {
	if flag != "" {
		return flag
	}
	if v := getenv("ROS_VERSION"); v != "" {
		return v
	}
	return "2"
}

// newTransport builds the middleware the --ros flag names from the ROS
// environment and the remaining command-line arguments, and the logger the
// node then uses: under ROS 2 it also publishes on /rosout and follows
// --ros-args --log-level (level is the --log-level flag's).
func newTransport(version string, args []string, cfg node.Config, log *slog.Logger, level slog.Level) (node.Transport, *slog.Logger, error) {
	switch version {
	case "1":
		env, rest, err := ros1.ParseROSEnv(args, os.Getenv, "lingbotmap")
		if err != nil {
			return nil, nil, err
		}
		if len(rest) > 0 {
			return nil, nil, fmt.Errorf("unexpected arguments %s (settings are flags like --queue-policy=all; ROS 1 remaps are from:=to)", strings.Join(rest, " "))
		}
		return ros1.New(ros1.Options{Env: env, Log: log,
			MasterCheckInterval: time.Duration(cfg.MasterCheckInterval * float64(time.Second))}), log, nil
	case "2":
		a, rest, err := ros2.ParseArgs(args, os.Getenv, "lingbotmap")
		if err != nil {
			return nil, nil, err
		}
		if len(rest) > 0 {
			for _, r := range rest {
				if strings.Contains(r, ":=") {
					// roslaunch's remaps (from:=to, __name:=) without --ros 1
					return nil, nil, fmt.Errorf("unexpected arguments %s: these look like ROS 1 remaps, and this node speaks ROS 2 (--ros and ROS_VERSION are unset, or say 2); for ROS 1 add --ros 1 (a ROS 1 setup.bash sets ROS_VERSION=1), for ROS 2 put them after --ros-args as -r from:=to", strings.Join(rest, " "))
				}
			}
			return nil, nil, fmt.Errorf("unexpected arguments %s (settings are flags like --queue-policy=all; ROS 2 arguments follow --ros-args)", strings.Join(rest, " "))
		}
		a.GidSize = cfg.ROS2GidSize
		h, err := ros2.NewLogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}), a, level)
		if err != nil {
			return nil, nil, err
		}
		log = slog.New(h)
		tr, err := ros2.New(a, log)
		return tr, log, err
	}
	return nil, nil, fmt.Errorf("--ros %q: want 2 (ROS 2) or 1 (ROS 1)", version)
}

// newNodeStream starts the real engine, or the golden replay when
// the replay setting names a golden case.
func newNodeStream(log *slog.Logger) node.StreamFactory {
	return func(ctx context.Context, cfg node.Config) (engine.Stream, error) {
		if cfg.Replay != "" {
			log.Warn("replaying reference outputs instead of running the model", "replay", cfg.Replay)
			return replay.New(cfg.Replay)
		}
		return newEngineStream(ctx, cfg.Engine, log)
	}
}

// resumeNodeStream starts the real engine from a saved session's engine state.
func resumeNodeStream(log *slog.Logger) node.ResumeFactory {
	return func(ctx context.Context, cfg node.Config, state io.Reader) (engine.Stream, error) {
		if cfg.Replay != "" {
			return nil, errors.New("a golden replay cannot resume a saved session")
		}
		return engine.Resume(ctx, cfg.Engine, backendFactory(log), state, log)
	}
}
