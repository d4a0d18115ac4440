package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/spf13/cobra"
)

func newCreds(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "creds", Short: "Principals and their credentials in the data directory"}
	var role string
	add := &cobra.Command{
		Use:   "add NAME --role agent|approver|operator|auditor",
		Short: "Create one more principal (a second approver, say); restart serve to admit it",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			r := authority.Role(role)
			if !r.Valid() || r == authority.RoleService {
				return usageError("--role must be agent, approver, operator or auditor")
			}
			if !authority.ValidName(args[0]) {
				return usageError("%q is not a valid principal name ([a-z0-9][a-z0-9_-]{0,63})", args[0])
			}
			p, err := authority.Add(g.data, args[0], r)
			if err != nil {
				return err
			}
			set, err := authority.Ensure(g.data)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s (%s) %s\n  creds: %s\n", p.Name, p.Role, p.PublicKey, set.CredsPath(p.Name))
			return nil
		},
	}
	add.Flags().StringVar(&role, "role", "", "the principal's role")
	list := &cobra.Command{
		Use:   "list",
		Short: "List the principals",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			set, err := authority.Ensure(g.data)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tROLE\tPUBLIC KEY")
			for _, p := range set.Principals() {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, p.Role, p.PublicKey)
			}
			return tw.Flush()
		},
	}
	cmd.AddCommand(add, list)
	return cmd
}
