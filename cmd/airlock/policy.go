package main

import (
	"fmt"

	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/spf13/cobra"
)

func newPolicy() *cobra.Command {
	cmd := &cobra.Command{Use: "policy", Short: "Work with policy files"}
	cmd.AddCommand(&cobra.Command{
		Use:   "check FILE",
		Short: "Validate a policy file and print its hash",
		Long: `Validate a policy file (YAML or JSON) and print the hash every decision
under it will carry. Exit status: 0 valid (warnings, such as a mode that
does not parse and so counts as locked, go to stderr), 1 invalid, 2 usage.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := policy.Load(args[0])
			if err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			for _, w := range p.Warnings() {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
			}
			fmt.Fprintln(cmd.OutOrStdout(), p.Hash())
			return nil
		},
	})
	return cmd
}
