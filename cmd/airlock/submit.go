package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/producers"
	"github.com/spf13/cobra"
)

func newSubmit(g *globals) *cobra.Command {
	var (
		req    events.Request
		args   string
		wait   time.Duration
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "submit --ws W --tool T --args JSON [--agent A]",
		Short: "Submit a tool request and wait for its outcome",
		Long: `Submit a tool request and wait for its outcome.

Exit status: 0 completed, 1 failed, rejected or an error, 2 usage,
3 held for an approver (APPROVAL_REQUIRED, with the hold id) or still
pending when --wait ran out, 4 denied (or expired, or ambiguous).`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if req.Agent == "" {
				// The agent is the principal publishing: the credential's.
				req.Agent = principal(g.credsFor("agent"), "agent")
			}
			for _, f := range []struct{ name, value string }{{"ws", req.Workspace}, {"agent", req.Agent}, {"tool", req.Tool}} {
				if f.value == "" {
					return usageError("--%s is required", f.name)
				}
			}
			req.Args = json.RawMessage(args)
			if err := req.Validate(); err != nil {
				if asJSON {
					printJSON(cmd.OutOrStdout(), map[string]any{"state": "rejected", "error_code": events.CodeOf(err), "error": err.Error()})
				}
				return &exitError{code: exitUsage, err: err}
			}
			if wait <= 0 {
				return usageError("--wait must be positive")
			}
			nc, err := g.connect("agent")
			if err != nil {
				return report(cmd.OutOrStdout(), producers.Outcome{}, &events.Error{Code: events.CodeUnavailable, Message: err.Error(), Retryable: true}, asJSON)
			}
			defer nc.Close()
			c, err := producers.New(nc, producers.WithWait(wait), producers.WithSource("airlock/cli"))
			if err != nil {
				return err
			}
			defer c.Close()
			out, err := c.Submit(cmd.Context(), req)
			return report(cmd.OutOrStdout(), out, err, asJSON)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Workspace, "ws", "", "workspace")
	f.StringVar(&req.Agent, "agent", "", "agent: the principal of the credential used (default: its name); the server lets an agent submit only under its own name")
	f.StringVar(&req.Tool, "tool", "", "tool")
	f.StringVar(&args, "args", "{}", "arguments, a JSON value")
	f.StringVar(&req.IdempotencyKey, "idempotency-key", "", "distinguishes two deliberate calls with equal arguments")
	f.DurationVar(&wait, "wait", 30*time.Second, "how long to wait for a terminal outcome")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

// report prints a submit outcome and returns the exit status for it.
func report(w io.Writer, out producers.Outcome, err error, asJSON bool) error {
	if err != nil {
		var e *events.Error
		if !errors.As(err, &e) {
			if errors.Is(err, context.Canceled) {
				return &exitError{code: exitFailed, err: err}
			}
			e = events.Errorf(events.CodeInternal, "%v", err)
		}
		state := "rejected"
		if e.Code == events.CodeUnavailable || e.Code == events.CodeInternal {
			state = "error"
		}
		if asJSON {
			printJSON(w, map[string]any{"op_id": out.OpID, "state": state, "error_code": e.Code, "error": e.Message})
		} else {
			fmt.Fprintf(os.Stderr, "%s: %s: %s\n", state, e.Code, e.Message)
		}
		return &exitError{code: exitFailed}
	}
	if asJSON {
		printJSON(w, out)
	} else {
		fmt.Fprintf(w, "%s %s", out.OpID, out.State)
		if out.Pending {
			fmt.Fprint(w, " (pending: wait ran out)")
		}
		if out.Code != "" {
			fmt.Fprintf(w, " %s: %s", out.Code, out.Message)
		}
		fmt.Fprintln(w)
		if out.Held() {
			fmt.Fprintf(w, "hold %s covers args %s; expires %s\n", out.HoldID, out.ArgsDigest, out.HoldExpiresAt.Format(time.RFC3339))
		}
		switch {
		case len(out.Result) > 0:
			fmt.Fprintln(w, string(out.Result))
		case out.ResultDigest != "":
			// The op completed before this request, or its reply was
			// lost: Airlock keeps no result, only its digest.
			fmt.Fprintf(w, "result not kept: %s, %d bytes\n", out.ResultDigest, out.ResultBytes)
		}
	}
	switch {
	case out.Pending, out.Held():
		return &exitError{code: exitPending}
	case out.State == events.StateCompleted:
		return nil
	case out.State == events.StateDenied, out.State == events.StateExpired, out.State == events.StateAmbiguous:
		return &exitError{code: exitDenied}
	default:
		return &exitError{code: exitFailed}
	}
}

func printJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
