package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lingbotmap/lingbotmap/engine/output"
	"github.com/lingbotmap/lingbotmap/engine/render"
	"github.com/lingbotmap/lingbotmap/engine/traj"
	"github.com/lingbotmap/lingbotmap/internal/atomicfile"
)

type evalOptions struct {
	est, ref string
	opt      traj.Options
	align    string
	jsonOut  string
	plotOut  string
	topic    string // the pose topic of a ROS 2 bag
}

func newEvalCmd() *cobra.Command {
	o := &evalOptions{opt: traj.DefaultOptions()}
	cmd := &cobra.Command{
		Use:   "eval EST REF",
		Short: "Compare an estimated trajectory with a reference: ATE and RPE",
		Long: `eval compares two TUM trajectories ("timestamp tx ty tz qx qy qz qw" per line),
as the TUM RGB-D benchmark and evo do. Either may instead be a ROS 2 bag (a
rosbag2 bag directory, as ros2 bag record writes it, or an .mcap or .db3
file): its geometry_msgs/msg/PoseStamped topic (or nav_msgs/msg/Odometry;
--topic picks one) is the trajectory, stamped with the message headers, so a
recording of the node's ~/pose is compared directly. Poses are associated by timestamp
(closest first, one-to-one, within --max-diff seconds after adding --offset to
the estimate's stamps), the estimate is aligned to the reference by Umeyama's
closed form (--align sim3 for monocular estimates, se3, or none), then it reports:

  ATE  absolute trajectory error: distance between associated positions
  RPE  relative pose error over --delta associated poses: translation and
       rotation (degrees) of (Q_i⁻¹Q_{i+Δ})⁻¹(P_i⁻¹P_{i+Δ})

each as RMSE, mean, median, standard deviation, min and max, in the
reference's units.

Stamps equal within their floating-point resolution are always associated,
however small --max-diff is. As evo does, sim3 and se3 refuse positions that
cannot fix a rotation (fewer than 3 pairs, or all on one line; exit code 5).
--json and --plot files are written whole or not at all.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.est, o.ref = args[0], args[1]
			return runEval(o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.opt.Delta, "delta", o.opt.Delta, "RPE step in associated poses")
	f.Float64Var(&o.opt.MaxDiff, "max-diff", o.opt.MaxDiff, "largest timestamp difference (s) for two poses to be associated")
	f.Float64Var(&o.opt.Offset, "offset", 0, "time offset (s) added to the estimate's stamps")
	f.StringVar(&o.align, "align", string(o.opt.Align), "alignment: sim3 (rotation, translation, scale), se3 or none")
	f.StringVar(&o.jsonOut, "json", "", "write the results as JSON to this file")
	f.StringVar(&o.plotOut, "plot", "", "draw both trajectories after alignment and the error over time to this PNG")
	f.StringVar(&o.topic, "topic", "", "pose topic (PoseStamped or Odometry) of a ROS 2 bag given as EST or REF (default: its only one)")
	return cmd
}

// evalJSON is what --json writes.
type evalJSON struct {
	Estimate  string `json:"estimate"`
	Reference string `json:"reference"`
	*traj.Report
}

func runEval(o *evalOptions, stdout io.Writer) error {
	a, err := traj.ParseAlignment(o.align)
	if err != nil {
		return &exitCodeError{code: exitUsage, err: err}
	}
	o.opt.Align = a
	// The flags are checked before any file is read, as usage errors.
	switch {
	case !(o.opt.MaxDiff > 0) || math.IsInf(o.opt.MaxDiff, 0):
		return &exitCodeError{code: exitUsage, err: fmt.Errorf("--max-diff must be a positive number of seconds, not %g", o.opt.MaxDiff)}
	case math.IsNaN(o.opt.Offset) || math.IsInf(o.opt.Offset, 0):
		return &exitCodeError{code: exitUsage, err: fmt.Errorf("--offset must be a finite number of seconds, not %g", o.opt.Offset)}
	case o.opt.Delta < 1:
		return &exitCodeError{code: exitUsage, err: fmt.Errorf("--delta must be at least 1 pose, not %d", o.opt.Delta)}
	}
	est, err := readTrajectory(o.est, o.topic)
	if err != nil {
		return fmt.Errorf("estimate: %w", err)
	}
	ref, err := readTrajectory(o.ref, o.topic)
	if err != nil {
		return fmt.Errorf("reference: %w", err)
	}
	rep, err := traj.Evaluate(est, ref, o.opt)
	if err != nil {
		return err
	}
	printEval(stdout, o, rep)
	if o.jsonOut != "" {
		b, err := json.MarshalIndent(evalJSON{Estimate: o.est, Reference: o.ref, Report: rep}, "", "  ")
		if err != nil {
			return fmt.Errorf("eval: %w", err)
		}
		err = atomicfile.WriteFile(o.jsonOut, func(w io.Writer) error {
			_, err := w.Write(append(b, '\n'))
			return err
		})
		if err != nil {
			return fmt.Errorf("eval: write JSON: %w", err)
		}
	}
	if o.plotOut != "" {
		times := make([]float64, len(rep.Reference))
		for i, p := range rep.Reference {
			times[i] = p.Time - rep.Reference[0].Time
		}
		// ASCII only: the plot font has no Δ or °
		title := fmt.Sprintf("ATE RMSE %.4g m (%s alignment, scale %.4g), %d pairs; RPE(delta %d) %.4g m, %.3g deg",
			rep.ATE.RMSE, rep.Options.Align, rep.Alignment.S, rep.Pairs, rep.Options.Delta, rep.RPETrans.RMSE, rep.RPERot.RMSE)
		img, err := render.EvalPlot(rep.Reference.Positions(), rep.Aligned.Positions(), rep.ATEErrors, times, render.EvalPlotOptions{Title: title})
		if err != nil {
			return err
		}
		if err := output.WritePNG(o.plotOut, img); err != nil {
			return err
		}
	}
	return nil
}

func printEval(w io.Writer, o *evalOptions, rep *traj.Report) {
	fmt.Fprintf(w, "estimate:   %s (%d poses)\n", o.est, rep.EstPoses)
	fmt.Fprintf(w, "reference:  %s (%d poses)\n", o.ref, rep.RefPoses)
	fmt.Fprintf(w, "associated: %d pairs (max difference %g s, offset %g s)\n", rep.Pairs, rep.Options.MaxDiff, rep.Options.Offset)
	g := rep.Alignment
	fmt.Fprintf(w, "alignment:  %s, scale %.6g, translation [%.4g %.4g %.4g]\n", rep.Options.Align, g.S, g.T[0], g.T[1], g.T[2])
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\t%10s %10s %10s %10s %10s %10s\n", "rmse", "mean", "median", "std", "min", "max")
	row := func(name string, s traj.Stats) {
		fmt.Fprintf(tw, "%s\t%10.6f %10.6f %10.6f %10.6f %10.6f %10.6f\n", name, s.RMSE, s.Mean, s.Median, s.Std, s.Min, s.Max)
	}
	row("ATE [m]", rep.ATE)
	row(fmt.Sprintf("RPE(Δ=%d) trans [m]", rep.Options.Delta), rep.RPETrans)
	row(fmt.Sprintf("RPE(Δ=%d) rot [deg]", rep.Options.Delta), rep.RPERot)
	tw.Flush()
}
