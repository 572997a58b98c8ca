package main

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "lingbotmap",
		Short:         "Streaming 3D mapping with the LingBot-Map model",
		SilenceUsage:  true,
		SilenceErrors: true,
		// cobra's own default distance for "did you mean"
		SuggestionsMinimumDistance: 2,
		// Runnable with an argument check, so that an unknown command is a
		// usage error like any other instead of cobra's plain error.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += "; did you mean " + strings.Join(s, " or ") + "?"
			}
			return fmt.Errorf("%s (lingbotmap --help lists the commands)", msg)
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	// One constructor per subcommand, each in its own file.
	root.AddCommand(
		newVersionCmd(),
		newVerifyCmd(),
		newBenchCmd(),
		newNodeCmd(),
		newRunCmd(),
		newEvalCmd(),
		newBagCmd(),
	)
	// A wrong flag is a usage error (exit 2), as a wrong setting is.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitCodeError{code: exitUsage, err: err}
	})
	// So are wrong arguments: a missing or extra one, an unknown command.
	usageArgs(root)
	return root
}

// usageArgs makes the argument check of cmd and of every command under it
// return its error as a usage error (exit 2).
func usageArgs(cmd *cobra.Command) {
	if check := cmd.Args; check != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				return &exitCodeError{code: exitUsage, err: err}
			}
			return nil
		}
	}
	for _, c := range cmd.Commands() {
		usageArgs(c)
	}
}

// version is set at build time with -ldflags "-X main.version=..."; a plain
// build reports the git commit it was built from (versionString).
var version = "dev"

// versionString is version, or for a "dev" build the git commit recorded in
// the binary ("dev+3f2a1c9d0e1b", "-modified" for a tree with changes).
func versionString() string {
	if version != "dev" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return version
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "-modified"
			}
		}
	}
	if rev == "" {
		return version
	}
	return version + "+" + rev[:min(12, len(rev))] + modified
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version on standard output",
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), "lingbotmap", versionString())
			return nil
		},
	}
}
