package main

import (
	"fmt"
	"time"

	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/producers"
	"github.com/spf13/cobra"
)

func newCtl(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "ctl", Short: "Controls (as an operator)"}
	cmd.AddCommand(newCtlMode(g))
	return cmd
}

func newCtlMode(g *globals) *cobra.Command {
	var (
		reason string
		dur    time.Duration
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "mode WS auto|confirm|locked|default --reason R [--for DUR]",
		Short: "Set a workspace's permission mode (default: back to the policy's)",
		Long: `Set a workspace's permission mode, overriding the policy's, for the next
decision and for every resume of a grant after it. "default" clears the
override. With --for the override ends by itself after DUR.`,
		Args: usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, mode := args[0], args[1]
			if mode == "default" {
				mode = ""
			} else if !policy.ValidMode(mode) {
				return usageError("mode %q is not auto, confirm, locked or default", mode)
			}
			if reason == "" {
				return usageError("--reason must say why: it is recorded")
			}
			if dur < 0 {
				return usageError("--for must not be negative")
			}
			var until *time.Time
			if dur > 0 {
				t := time.Now().Add(dur).UTC()
				until = &t
			}
			nc, err := g.connect("operator")
			if err != nil {
				return err
			}
			defer nc.Close()
			op, err := producers.NewOperator(nc, principal(g.credsFor("operator"), "operator"))
			if err != nil {
				return err
			}
			ms, err := op.SetMode(cmd.Context(), ws, mode, reason, until)
			if err != nil {
				return commandFailed(cmd, err, asJSON)
			}
			w := cmd.OutOrStdout()
			if asJSON {
				printJSON(w, ms)
				return nil
			}
			shown := ms.Mode
			if shown == "" {
				shown = "the policy's mode"
			}
			fmt.Fprintf(w, "%s: %s (by %s)", ws, shown, ms.Actor)
			if ms.ExpiresAt != nil {
				fmt.Fprintf(w, " until %s", ms.ExpiresAt.Format(time.RFC3339))
			}
			fmt.Fprintln(w)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded with the control)")
	_ = cmd.MarkFlagRequired("reason")
	cmd.Flags().DurationVar(&dur, "for", 0, "end the override after this long (0: until changed)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the recorded control as JSON")
	return cmd
}
