package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "lingbotmap",
		Short:         "Streaming 3D mapping with the LingBot-Map model",
		SilenceUsage:  true,
		SilenceErrors: true,
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
	return root
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
