// Command lingbotmap is the LingBot-Map streaming 3D mapper: a ROS node
// (node), offline tools (run, eval, bag) and the engine's checks (verify, bench).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes. exitCode (exitcode.go) maps errors onto them.
const (
	exitOK        = 0
	exitError     = 1 // anything not listed below (I/O errors, a failed backend, ...)
	exitUsage     = 2 // bad flags or arguments, sizes out of range
	exitTolerance = 3 // verify: an output is beyond tolerance
	exitPartial   = 4 // the input was truncated or partly corrupt: outputs cover what was read
	exitBadInput  = 5 // an input cannot be used: corrupt checkpoint, trajectory that cannot be aligned
)

// exitCodeError carries a specific exit code out of a command.
type exitCodeError struct {
	code int
	err  error
}

func (e *exitCodeError) Error() string { return e.err.Error() }
func (e *exitCodeError) Unwrap() error { return e.err }

// stopSignals all end a command the same clean way: Ctrl-C, a service
// manager's SIGTERM, and the SIGHUP of a closed terminal or SSH session.
func stopSignals() []os.Signal { return []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP} }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), stopSignals()...)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

func run(ctx context.Context, args []string) int {
	root := newRootCmd()
	root.SetArgs(protectROSArgs(args))
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(os.Stderr, "lingbotmap:", err)
	return exitCode(err)
}

// protectROSArgs puts "--" before a ROS 2 argument block (--ros-args …),
// which ros2 launch appends after a program's own arguments, so that the flag
// parser hands it on untouched as arguments (to node and bag play) instead
// of rejecting -r and -p as unknown flags. A block with no command in front
// (`ros2 run lingbotmap lingbotmap --ros-args …`) starts the ROS 2 node.
func protectROSArgs(args []string) []string {
	if len(args) > 0 && args[0] == "--ros-args" {
		return append([]string{"node", "--ros=2", "--"}, args...)
	}
	for i, a := range args {
		switch a {
		case "--":
			return args
		case "--ros-args":
			return append(append(append([]string{}, args[:i]...), "--"), args[i:]...)
		}
	}
	return args
}
