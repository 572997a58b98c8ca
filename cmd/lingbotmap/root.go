package main

import (
	"fmt"

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
	return root
}

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version on standard output",
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), "lingbotmap", version)
			return nil
		},
	}
}
