package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/internal/golden/replay"
	"github.com/lingbotmap/lingbotmap/node"
	"github.com/lingbotmap/lingbotmap/node/ros1"
)

// nodeOptions are the node subcommand's own flags; the settings are in node.Config.
type nodeOptions struct {
	configFile string
	logLevel   string
	ros        string // ROS version: "1" (goroslib)
}

func newNodeCmd() *cobra.Command {
	opts := &nodeOptions{}
	v := viper.New()
	cmd := &cobra.Command{
		Use:   "node [--config FILE] [--key=value ...] [from:=to ...]",
		Short: "Run the ROS mapping node",
		Long: `Run the LingBot-Map ROS node: subscribe to images, publish poses, path,
odometry, clouds, the map, depth, TF and /diagnostics; services ~reset, ~pause,
~resume, ~save_map. --ros picks the middleware: 1 is ROS 1 (goroslib).

Settings (see config/lingbotmap.yaml) come from the built-in defaults, the
--config file, LINGBOTMAP_* environment variables, flags named like the keys
(--engine.weights, --queue_policy) and ROS private parameters (~queue_policy).
ROS_MASTER_URI, ROS_HOSTNAME/ROS_IP, ROS_NAMESPACE and roslaunch's __name:=,
__ns:=, __log:= and from:=to arguments are honoured.`,
		Args: cobra.ArbitraryArgs,
	}
	cmd.Flags().StringVar(&opts.configFile, "config", "", "YAML configuration file (default: built-in defaults)")
	cmd.Flags().StringVar(&opts.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	cmd.Flags().StringVar(&opts.ros, "ros", "1", "ROS version to speak: 1")
	node.AddFlags(cmd.Flags())
	bindErr := node.BindFlags(v, cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if bindErr != nil {
			return bindErr
		}
		return runNode(cmd.Context(), v, opts, args)
	}
	return cmd
}

func runNode(ctx context.Context, v *viper.Viper, opts *nodeOptions, args []string) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(opts.logLevel)); err != nil {
		return &exitCodeError{code: exitUsage, err: fmt.Errorf("--log-level %q: want debug, info, warn or error", opts.logLevel)}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	cfg, err := node.LoadConfig(v, opts.configFile)
	if err != nil {
		return &exitCodeError{code: exitUsage, err: err}
	}
	tr, err := newTransport(opts.ros, args, cfg, log)
	if err != nil {
		return &exitCodeError{code: exitUsage, err: err}
	}
	n, err := node.New(node.Options{Config: cfg, Transport: tr, Log: log, NewStream: newNodeStream(log)})
	if err != nil {
		return &exitCodeError{code: exitUsage, err: err}
	}
	return n.Run(ctx)
}

// newTransport builds the middleware the --ros flag names from the ROS
// environment and the remaining command-line arguments.
func newTransport(version string, args []string, cfg node.Config, log *slog.Logger) (node.Transport, error) {
	switch version {
	case "1":
		env, rest, err := ros1.ParseROSEnv(args, os.Getenv, "lingbotmap")
		if err != nil {
			return nil, err
		}
		if len(rest) > 0 {
			return nil, fmt.Errorf("unexpected arguments %s (settings are flags like --queue_policy=all; remaps are from:=to)", strings.Join(rest, " "))
		}
		return ros1.New(ros1.Options{Env: env, Log: log,
			MasterCheckInterval: time.Duration(cfg.MasterCheckInterval * float64(time.Second))}), nil
	case "2":
		return nil, fmt.Errorf("--ros 2: ROS 2 is not available in this build")
	}
	return nil, fmt.Errorf("--ros %q: want 1 (ROS 1) or 2 (ROS 2)", version)
}

// newNodeStream starts the real engine, or the golden replay when
// the replay setting names a golden case.
func newNodeStream(log *slog.Logger) node.StreamFactory {
	return func(ctx context.Context, cfg node.Config) (engine.Stream, error) {
		if cfg.Replay != "" {
			log.Warn("replaying reference outputs instead of running the model", "replay", cfg.Replay)
			return replay.New(cfg.Replay)
		}
		return engine.New(ctx, cfg.Engine, log)
	}
}
