package main

import (
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/spf13/cobra"
)

func newCreds(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "creds", Short: "Principals and their credentials in the data directory"}
	var role, pubKey, out string
	add := &cobra.Command{
		Use:   "add NAME --role agent|approver|operator|auditor [--public-key U... | --out FILE]",
		Short: "Create one more principal (a second approver, say); restart serve to admit it",
		Long: `Create one more principal; restart serve to admit it.

By default its seed is written to <data>/creds/NAME.creds. With
--public-key, the principal's owner made the seed (nk -gen user) and the
data dir only learns the public key; with --out FILE, a new seed is
written to FILE instead of the data dir. Either way the data dir never
holds the seed: an agent's results are sealed to its key, so nobody who
reads the data dir can open them.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			r := authority.Role(role)
			if !r.Valid() || r == authority.RoleService {
				return usageError("--role must be agent, approver, operator or auditor")
			}
			if !authority.ValidName(args[0]) {
				return usageError("%q is not a valid principal name ([a-z0-9][a-z0-9_-]{0,63})", args[0])
			}
			var (
				p   authority.Principal
				err error
			)
			switch {
			case out != "":
				if pubKey, err = authority.NewSeedFile(out); err != nil {
					return fmt.Errorf("--out: %w", err)
				}
				fallthrough
			case pubKey != "":
				if p, err = authority.AddExternal(g.data, args[0], r, pubKey); err != nil {
					if out != "" {
						_ = os.Remove(out)
					}
					return err
				}
				where := out
				if where == "" {
					where = "with its owner (not in the data dir)"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s (%s) %s\n  creds: %s\n", p.Name, p.Role, p.PublicKey, where)
				return nil
			}
			p, err = authority.Add(g.data, args[0], r)
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
	add.Flags().StringVar(&pubKey, "public-key", "", "register this nkey user public key (U...), whose seed its owner keeps")
	add.Flags().StringVar(&out, "out", "", "write the new principal's creds file here, not into the data dir")
	_ = add.MarkFlagRequired("role")
	add.MarkFlagsMutuallyExclusive("public-key", "out")
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
			fmt.Fprintln(tw, "NAME\tROLE\tPUBLIC KEY\tSEED")
			for _, p := range set.Principals() {
				seed := "in the data dir"
				if p.External {
					seed = "elsewhere"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Name, p.Role, p.PublicKey, seed)
			}
			return tw.Flush()
		},
	}
	cmd.AddCommand(add, list)
	return cmd
}
