package main

import (
	"errors"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/engine/source"
	"github.com/lingbotmap/lingbotmap/engine/traj"
	"github.com/lingbotmap/lingbotmap/engine/weights"
	"github.com/lingbotmap/lingbotmap/msgs/mcapbag"
	"github.com/lingbotmap/lingbotmap/msgs/rosbag2"
	"github.com/lingbotmap/lingbotmap/node"
)

// exitCode is the exit code for an error that ended a command: the code an
// exitCodeError carries, else the class of bad input found anywhere in the
// error's chain, else exitError. The classes are the typed errors of the
// packages that find them, so commands need not translate each one.
func exitCode(err error) int {
	var (
		ec        *exitCodeError
		mismatch  *weights.MismatchError
		nonFinite *weights.NonFiniteError
		bagPart   *rosbag2.PartialError
		mcapPart  *mcapbag.DamageError
	)
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ec):
		return ec.code
	case errors.Is(err, source.ErrPartial), errors.As(err, &bagPart), errors.As(err, &mcapPart):
		return exitPartial
	case errors.As(err, &mismatch), errors.As(err, &nonFinite), errors.Is(err, traj.ErrDegenerate):
		return exitBadInput
	case errors.Is(err, engine.ErrInputSize), errors.Is(err, node.ErrSettings), errors.Is(err, mapio.ErrConfig):
		return exitUsage
	}
	return exitError
}
