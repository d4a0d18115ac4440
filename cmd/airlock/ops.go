package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/producers"
	"github.com/spf13/cobra"
)

func newOps(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "ops", Short: "Look at ops as the projection holds them"}
	cmd.AddCommand(newOpsGet(g), newOpsList(g), newOpsResult(g))
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

func newOpsResult(g *globals) *cobra.Command {
	var (
		agent  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "result OP_ID",
		Short: "Print a completed op's result: for the agent that requested it only",
		Long: `Print a completed op's result, as Airlock keeps it for the agent that
requested the op: sealed to that agent's key, opened here with the seed in
the credential the command connects with, and checked against the digest
the op's completed event recorded. Any other principal gets NOT_REQUESTER
and the digest.

Exit status: 0 printed, 1 an error (NOT_FOUND, NOT_REQUESTER,
RESULT_MISMATCH, ...), 2 usage, 3 the op has not completed yet
(NOT_COMPLETED), 4 no result to print: the op ended otherwise, or its
result is gone (RESULT_EXPIRED) or was never kept (RESULT_NOT_KEPT).`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !events.ValidOpID(args[0]) {
				return usageError("%q is not an op id (op_<32 hex>)", args[0])
			}
			if agent == "" {
				agent = principal(g.credsFor("agent"), "agent")
			}
			c, done, err := g.agentClient()
			if err != nil {
				return err
			}
			defer done()
			out, err := c.Result(cmd.Context(), agent, args[0])
			if r := g.refused(); r != nil {
				err = r.err
			}
			w := cmd.OutOrStdout()
			if err != nil {
				code := exitFailed
				e, _ := err.(*events.Error)
				switch {
				case e == nil:
				case e.Code == events.CodeNotCompleted && e.Retryable:
					code = exitPending
				case e.Code == events.CodeNotCompleted, e.Code == events.CodeResultExpired, e.Code == events.CodeResultNotKept:
					code = exitDenied
				}
				if asJSON && e != nil {
					printJSON(w, map[string]any{"op_id": args[0], "error_code": e.Code, "error": e.Message})
					return &exitError{code: code}
				}
				return &exitError{code: code, err: err}
			}
			if asJSON {
				printJSON(w, out)
				return nil
			}
			fmt.Fprintln(w, string(out.Result))
			return nil
		},
	}
	cmd.Flags().StringVar(&agent, "agent", "", "the agent that requested the op (default: the credential's principal); the server lets a principal ask only under its own name")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the outcome (op_id, state, result, result_digest, ...) as JSON")
	return cmd
}

// agentClient connects a producers client as the agent, with the
// credential's seed to open the results Airlock seals to it.
func (g *globals) agentClient(opts ...producers.Option) (*producers.Client, func(), error) {
	nc, err := g.connect("agent")
	if err != nil {
		return nil, nil, err
	}
	if path := g.credsFor("agent"); path != "" {
		seed, err := authority.Seed(path)
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		// Options run in New: the seed is cleared once it has.
		defer clear(seed)
		opts = append(opts, producers.WithAgentKey(seed))
	}
	c, err := producers.New(nc, opts...)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return c, func() { _ = c.Close(); nc.Close() }, nil
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
		// The bytes go to the requesting agent alone (ops result).
		kept := "not kept"
		switch {
		case op.ResultErased != "":
			kept = "erased (" + op.ResultErased + ")"
		case op.ResultKeptUntil != nil:
			kept = "kept for " + op.Agent + " until " + op.ResultKeptUntil.Format(time.RFC3339)
			if op.ResultEraseOnDelivery {
				kept += " or its delivery"
			}
		}
		row("result", fmt.Sprintf("%s, %d bytes, %s", op.ResultDigest, op.ResultBytes, kept))
	}
	row("created", op.CreatedAt.Format(time.RFC3339Nano))
	row("updated", op.UpdatedAt.Format(time.RFC3339Nano))
	return tw.Flush()
}
