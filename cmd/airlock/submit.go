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
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/producers"
	"github.com/spf13/cobra"
)

func newSubmit(g *globals) *cobra.Command {
	var (
		req      events.Request
		args     string
		argsFile string
		wait     time.Duration
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "submit --ws W --tool T --args JSON|--args-file FILE [--agent A]",
		Short: "Submit a tool request and wait for its outcome",
		Long: `Submit a tool request and wait for its outcome.

A completed op prints its result. Airlock keeps it, sealed to the
agent's key, for the workspace's retention (24h by default), so the same
submit again (same args, same idempotency key) prints it too, as does
airlock ops result OP_ID. Given --wait, a held op is waited through: once
an approver grants it, the op runs and its result is printed.

Exit status: 0 completed, 1 failed, rejected or an error, 2 usage,
3 held for an approver (APPROVAL_REQUIRED, with the hold id) or still
pending when --wait ran out, 4 denied (or expired, or ambiguous).`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if req.Agent == "" {
				// The agent is the principal publishing: the credential's.
				req.Agent = principal(g.credsFor("agent"), "agent")
			}
			if argsFile != "" {
				b, err := readArgsFile(cmd.InOrStdin(), argsFile)
				if err != nil {
					return err
				}
				args = string(b)
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
			opts := []producers.Option{producers.WithWait(wait), producers.WithSource("airlock/cli")}
			if cmd.Flags().Changed("wait") {
				// Asked to wait: a hold is waited through, for the result.
				opts = append(opts, producers.WithWaitThroughHolds())
			}
			c, done, err := g.agentClient(opts...)
			if err != nil {
				var x *exitError
				if errors.As(err, &x) {
					return err
				}
				return report(cmd.OutOrStdout(), producers.Outcome{}, &events.Error{Code: events.CodeUnavailable, Message: err.Error(), Retryable: true}, asJSON)
			}
			defer done()
			out, err := c.Submit(cmd.Context(), req)
			if r := g.refused(); r != nil {
				err = r.err
				if p, ok := authority.Identify(g.credsFor("agent")); ok && p.Role == authority.RoleAgent && p.Name != req.Agent {
					err = events.Errorf(events.CodePermissionDenied,
						"the server refused to let %s: an agent may submit only under its own name, and --agent %s is not the credential's principal, %s; drop --agent or use %s's own credential",
						r.what, req.Agent, p.Name, req.Agent)
				}
			}
			return report(cmd.OutOrStdout(), out, err, asJSON)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Workspace, "ws", "", "workspace")
	f.StringVar(&req.Agent, "agent", "", "agent: the principal of the credential used (default: its name); the server lets an agent submit only under its own name")
	f.StringVar(&req.Tool, "tool", "", "tool")
	f.StringVar(&args, "args", "{}", "arguments, a JSON value")
	f.StringVar(&argsFile, "args-file", "", "read the arguments from FILE (- for stdin) instead: for args too big for a command line")
	f.StringVar(&req.IdempotencyKey, "idempotency-key", "", "distinguishes two deliberate calls with equal arguments")
	f.DurationVar(&wait, "wait", 30*time.Second, "how long to wait for a terminal outcome; given, a held op is waited through its grant")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	_ = cmd.MarkFlagRequired("ws")
	_ = cmd.MarkFlagRequired("tool")
	cmd.MarkFlagsMutuallyExclusive("args", "args-file")
	return cmd
}

// readArgsFile reads --args-file: at most MaxRequestBytes, the most a
// request body may be.
func readArgsFile(stdin io.Reader, path string) ([]byte, error) {
	r := stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, usageError("--args-file: %v", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, events.MaxRequestBytes+1))
	if err != nil {
		return nil, usageError("--args-file: %v", err)
	}
	if len(b) > events.MaxRequestBytes {
		return nil, &exitError{code: exitUsage, err: events.Errorf(events.CodeArgsTooLarge, "--args-file %s is over %d bytes; args may be %d bytes in canonical form", path, events.MaxRequestBytes, events.MaxArgsBytes)}
	}
	return b, nil
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
		switch e.Code {
		case events.CodeUnavailable, events.CodeInternal, events.CodePermissionDenied, events.CodeNoCredential:
			state = "error"
		}
		if asJSON {
			printJSON(w, map[string]any{"op_id": out.OpID, "state": state, "error_code": e.Code, "error": e.Message})
		} else {
			fmt.Fprintf(os.Stderr, "airlock: %s: %s: %s\n", state, e.Code, e.Message)
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
			// The result is gone (retention, delivery), was never kept, or
			// this credential cannot open it: the digest is what is left.
			fmt.Fprintf(w, "result not available: %s: %s (digest %s, %d bytes)\n", out.ResultCode, out.ResultError, out.ResultDigest, out.ResultBytes)
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
