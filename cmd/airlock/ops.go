package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/producers"
	"github.com/spf13/cobra"
)

func newOps(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "ops", Short: "Look at ops as the projection holds them"}
	cmd.AddCommand(newOpsGet(g), newOpsList(g))
	return cmd
}

func newOpsGet(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get OP_ID",
		Short: "Show one op",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !events.ValidOpID(args[0]) {
				return usageError("%q is not an op id (op_<32 hex>)", args[0])
			}
			c, done, err := g.client()
			if err != nil {
				return err
			}
			defer done()
			op, err := c.Op(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				printJSON(w, struct {
					*events.Op
					Waits string `json:"waits,omitempty"`
				}{op, waitsFor(op)})
				return nil
			}
			return printOp(w, op)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the op as JSON")
	return cmd
}

func newOpsList(g *globals) *cobra.Command {
	var (
		q      events.ListQuery
		all    bool
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List ops, newest last, optionally of one state",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if q.State != "" {
				if _, err := events.ParseState(q.State); err != nil {
					return usageError("--state: %v (one of %v)", err, events.AllStates)
				}
			}
			if q.Limit < 1 || q.Limit > events.MaxPage {
				return usageError("--limit must be 1..%d", events.MaxPage)
			}
			c, done, err := g.client()
			if err != nil {
				return err
			}
			defer done()
			var ops []*events.Op
			for {
				page, err := c.List(cmd.Context(), q)
				if err != nil {
					return err
				}
				ops = append(ops, page.Ops...)
				if !all || page.Next == "" {
					q.Cursor = page.Next
					break
				}
				q.Cursor = page.Next
			}
			w := cmd.OutOrStdout()
			if asJSON {
				printJSON(w, events.ListResult{Ops: ops, Next: q.Cursor})
				return nil
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "OP\tSTATE\tWORKSPACE\tAGENT\tTOOL\tCODE\tUPDATED")
			for _, op := range ops {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", op.ID, op.State, op.Workspace, op.Agent, op.Tool, op.ErrorCode, op.UpdatedAt.Format(time.RFC3339))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if q.Cursor != "" {
				fmt.Fprintf(w, "more: --cursor %s (or --all)\n", q.Cursor)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&q.State, "state", "", "only ops in this state")
	f.StringVar(&q.Cursor, "cursor", "", "continue after a previous page")
	f.IntVar(&q.Limit, "limit", events.DefaultPage, "page size")
	f.BoolVar(&all, "all", false, "follow every page")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// client connects a producers client; done closes both.
func (g *globals) client() (*producers.Client, func(), error) {
	nc, err := g.connect("auditor")
	if err != nil {
		return nil, nil, err
	}
	c, err := producers.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return c, func() { _ = c.Close(); nc.Close() }, nil
}

// printOp prints one op, a field a line.
// waitsFor says what a pending op waits for, and until when where that
// is known: "" for an op that has ended.
func waitsFor(op *events.Op) string {
	switch op.State {
	case events.StateHeld:
		until := ""
		if op.HoldExpiresAt != nil {
			until = ", until " + op.HoldExpiresAt.Format(time.RFC3339) + " (then it expires)"
		}
		return "for an approver to grant or deny " + op.HoldID + until
	case events.StateGranted:
		return "for a gate to decide it again under the policy in force (consumer " + streams.ResumeConsumer + " on " + streams.Ops + ")"
	case events.StateReady:
		return "for an executor of " + op.Tool + " that serves workspace " + op.Workspace + " to claim it"
	case events.StateExecuting:
		who := "a runner"
		if op.Instance != "" {
			who = "instance " + op.Instance
			if op.Host != "" {
				who += " on " + op.Host
			}
		}
		since := ""
		if op.ClaimedAt != nil {
			since = " since " + op.ClaimedAt.Format(time.RFC3339)
		}
		started := "not started yet"
		if op.Started {
			started = "started"
		}
		return fmt.Sprintf("for attempt %s (%s) of %s%s: it runs while its runner heartbeats; if that runner is lost, another takes the op over one claim timeout (serve --claim-timeout, 30s by default) after its last heartbeat, or the same data dir at once when it restarts on the embedded server", op.Attempt, started, who, since)
	}
	return ""
}

func printOp(w io.Writer, op *events.Op) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if strings.TrimSpace(v) != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, v)
		}
	}
	row("op", op.ID)
	row("state", string(op.State))
	row("workspace", op.Workspace)
	row("agent", op.Agent)
	row("tool", op.Tool+" ("+op.Class+")")
	row("fingerprint", op.Fingerprint)
	row("args digest", op.ArgsDigest)
	row("policy", op.PolicyHash)
	row("rule", op.Rule)
	row("reason", op.Reason)
	row("hold", op.HoldID)
	if op.HoldExpiresAt != nil {
		row("hold expires", op.HoldExpiresAt.Format(time.RFC3339))
	}
	if op.Resolution != "" {
		row("resolution", op.Resolution+" by "+op.Approver)
	}
	row("attempts", fmt.Sprint(op.Attempts))
	row("waits", waitsFor(op))
	row("error", string(op.ErrorCode)+" "+op.Error)
	if op.ResultDigest != "" {
		// Airlock keeps no result: only the reply to the request had it.
		row("result", fmt.Sprintf("not kept: %s, %d bytes", op.ResultDigest, op.ResultBytes))
	}
	row("created", op.CreatedAt.Format(time.RFC3339Nano))
	row("updated", op.UpdatedAt.Format(time.RFC3339Nano))
	return tw.Flush()
}
