package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lingbotmap/lingbotmap/config"
	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/node"
)

// nodeOptions are the node subcommand's own flags; the settings are in node.Config.
type nodeOptions struct {
	settings *config.Binding
	logLevel string
}

func newNodeCmd() *cobra.Command {
	opts := &nodeOptions{}
	cmd := &cobra.Command{
		Use:   "node [--config FILE] [--key=value ...] [from:=to ...]",
		Short: "Run the ROS 1 mapping node",
		Long: `Run the LingBot-Map ROS 1 node: subscribe to images, publish poses, path,
odometry, clouds, the map, depth, TF and /diagnostics; services ~reset, ~pause,
~resume, ~save_map.

Settings (see config/lingbotmap.yaml) come from the built-in defaults, the
--config file, LINGBOTMAP_* environment variables (LINGBOTMAP_QUEUE_POLICY),
flags (--queue-policy) and ROS private parameters (~queue_policy).
ROS_MASTER_URI, ROS_HOSTNAME/ROS_IP, ROS_NAMESPACE and roslaunch's __name:=,
__ns:=, __log:= and from:=to arguments are honoured.`,
		Args: cobra.ArbitraryArgs,
	}
	cmd.Flags().StringVar(&opts.logLevel, "log-level", "info", "log level: debug, info, warn or error")
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

	ros, rest, err := node.ParseROSEnv(args, os.Getenv, "lingbotmap")
	if err != nil {
		return &exitCodeError{code: exitUsage, err: err}
	}
	if len(rest) > 0 {
		return &exitCodeError{code: exitUsage, err: fmt.Errorf("unexpected arguments %s (settings are flags like --queue-policy=all; remaps are from:=to)", strings.Join(rest, " "))}
	}
	cfg, _, err := node.LoadConfig(opts.settings)
	if err != nil {
		return &exitCodeError{code: exitUsage, err: err}
	}
	n, err := node.New(node.Options{Config: cfg, ROS: ros, Log: log, NewStream: newNodeStream(log)})
	if err != nil {
		return &exitCodeError{code: exitUsage, err: err}
	}
	return n.Run(ctx)
}

// newNodeStream starts the real engine, or the golden replay when
// the replay setting names a golden case.
func newNodeStream(log *slog.Logger) node.StreamFactory {
	return func(ctx context.Context, cfg node.Config) (engine.Stream, error) {
		if cfg.Replay != "" {
			log.Warn("replaying reference outputs instead of running the model", "replay", cfg.Replay)
			return node.NewReplayStream(cfg.Replay)
		}
		return newEngineStream(ctx, cfg.Engine, log)
	}
}
