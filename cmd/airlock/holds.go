package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/producers"
	"github.com/spf13/cobra"
)

func newHolds(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "holds", Short: "List, show, grant and deny holds (as an approver)"}
	cmd.AddCommand(newHoldsList(g), newHoldsShow(g), newHoldsResolve(g, events.DecisionGrant), newHoldsResolve(g, events.DecisionDeny))
	return cmd
}

// approver connects as the approver principal --creds (or the default
// approver credential) names.
func (g *globals) approver() (*producers.Approver, func(), error) {
	nc, err := g.connect("approver")
	if err != nil {
		return nil, nil, err
	}
	var opts []producers.ApproverOption
	if path := g.credsFor("approver"); path != "" {
		// Every grant and deny is signed with the approver's own key.
		seed, err := authority.Seed(path)
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		defer clear(seed)
		opts = append(opts, producers.WithApproverKey(seed))
	}
	a, err := producers.NewApprover(nc, principal(g.credsFor("approver"), "approver"), opts...)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return a, nc.Close, nil
}

func newHoldsList(g *globals) *cobra.Command {
	var (
		ws     string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list [--ws W]",
		Short: "List pending holds, oldest first",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ws != "" && !events.ValidName(ws) {
				return usageError("--ws %q is not a valid workspace name", ws)
			}
			a, done, err := g.approver()
			if err != nil {
				return err
			}
			defer done()
			ops, err := a.ListHolds(cmd.Context(), ws)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				if ops == nil {
					ops = []*events.Op{}
				}
				printJSON(w, ops)
				return nil
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "HOLD\tWORKSPACE\tAGENT\tTOOL\tEXPIRES\tREASON")
			for _, op := range ops {
				exp := ""
				if op.HoldExpiresAt != nil {
					exp = op.HoldExpiresAt.Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", op.HoldID, op.Workspace, op.Agent, op.Tool, exp, op.Reason)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&ws, "ws", "", "only holds of this workspace")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array of held ops")
	return cmd
}

func newHoldsShow(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show HOLD",
		Short: "Show a hold: the op, the args digest a grant must name, the expiry",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, ok := events.OpOfHold(args[0]); !ok {
				return usageError("%q is not a hold id (hold_<32 hex>)", args[0])
			}
			a, done, err := g.approver()
			if err != nil {
				return err
			}
			defer done()
			op, err := a.Hold(cmd.Context(), args[0])
			if err != nil {
				return commandFailed(cmd, err, asJSON)
			}
			argsJSON, digest, err := a.Args(cmd.Context(), op)
			if erased(op, err) {
				// A hold that ended: its op's request was erased with the
				// argument plaintext. The op and its digest remain.
				if asJSON {
					printJSON(cmd.OutOrStdout(), op)
					return nil
				}
				if err := printOp(cmd.OutOrStdout(), op); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "args: erased once the op ended (%s)\n", op.ArgsDigest)
				return nil
			}
			if err != nil {
				return commandFailed(cmd, err, asJSON)
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), struct {
					*events.Op
					Args json.RawMessage `json:"args"`
				}{op, argsJSON})
				return nil
			}
			if err := printOp(cmd.OutOrStdout(), op); err != nil {
				return err
			}
			if digest != op.ArgsDigest {
				fmt.Fprintf(cmd.OutOrStdout(), "WARNING: the request's args digest %s differs from the hold's\n", digest)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "args (canonical, %s):\n%s\n", digest, argsJSON)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the op as JSON")
	return cmd
}

func newHoldsResolve(g *globals, decision events.Decision) *cobra.Command {
	var (
		reason, digest string
		asJSON         bool
		wait           time.Duration
	)
	verb := string(decision)
	cmd := &cobra.Command{
		Use:   verb + " HOLD --reason R [--digest sha256:...]",
		Short: map[events.Decision]string{events.DecisionGrant: "Grant a hold: the op is decided again under the policy in force and runs once", events.DecisionDeny: "Deny a hold: the op ends denied and never runs"}[decision],
		Long: `The resolution names the args digest it covers. Without --digest it is
the digest of the args read from the request itself (what "holds show"
prints), and the gate refuses it (GRANT_DIGEST_MISMATCH) unless the hold
covers exactly those args; with --digest, the digest given (as copied from
"holds show" after reading the args).

A grant then waits (--wait) for the op to start running: the gate decides
it again under the policy in force (a lockdown since denies it,
RESUME_DENIED) and the executor checks its operands (OPERANDS_CHANGED).

Exit status: 0 denied, or granted and the op is executing or completed; 1
refused or an error; 2 usage; 3 granted and the op still waits to run when
--wait ran out; 4 granted but the op then ended without completing (denied
on resume, failed, expired or ambiguous: the line names the code).`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			holdID := args[0]
			opID, ok := events.OpOfHold(holdID)
			if !ok {
				return usageError("%q is not a hold id (hold_<32 hex>)", holdID)
			}
			if reason == "" {
				return usageError("--reason must say why: it is recorded")
			}
			a, done, err := g.approver()
			if err != nil {
				return err
			}
			defer done()
			op, err := a.Hold(cmd.Context(), holdID)
			if err != nil {
				return commandFailed(cmd, err, asJSON)
			}
			if digest == "" {
				// Bind the resolution to the args as read from the request
				// itself, not to the digest the projection shows.
				_, digest, err = a.Args(cmd.Context(), op)
				if erased(op, err) {
					// The hold has ended: the gate answers how, and
					// whether this resolution is the one that stands.
					digest, err = op.ArgsDigest, nil
				}
				if err != nil {
					return commandFailed(cmd, err, asJSON)
				}
			}
			r, err := a.ResolveOp(cmd.Context(), op, events.Resolution{HoldID: holdID, ArgsDigest: digest, Decision: decision, Reason: reason})
			if err != nil {
				return commandFailed(cmd, err, asJSON)
			}
			// A grant is not yet a run: the gate decides the op again
			// under the policy in force, and the executor checks its
			// operands. Wait for where it went.
			state, code, msg := r.State, events.Code(""), ""
			if decision == events.DecisionGrant && wait > 0 {
				op, err := awaitResumed(cmd.Context(), a, opID, wait)
				if err != nil {
					return commandFailed(cmd, err, asJSON)
				}
				state, code, msg = op.State, op.ErrorCode, op.Error
			}
			status := resolvedStatus(decision, state)
			w := cmd.OutOrStdout()
			if asJSON {
				out := map[string]any{"op_id": opID, "hold_id": holdID, "args_digest": digest, "decision": decision, "state": state, "existing": r.Existing}
				if code != "" {
					out["error_code"], out["error"] = code, msg
				}
				printJSON(w, out)
			} else {
				again := ""
				if r.Existing {
					again = " (already, by you)"
				}
				fmt.Fprintf(w, "%s %s%s: op %s %s", holdID, pastTense[decision], again, opID, state)
				switch {
				case code != "":
					fmt.Fprintf(w, " %s: %s", code, msg)
				case status == exitPending:
					fmt.Fprintf(w, " (still waiting for the executor after %s)", wait)
				}
				fmt.Fprintf(w, " (args %s)\n", digest)
			}
			if status != exitOK {
				return &exitError{code: status}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded with the resolution)")
	_ = cmd.MarkFlagRequired("reason")
	cmd.Flags().StringVar(&digest, "digest", "", "the args digest the resolution covers (default: the hold's)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	if decision == events.DecisionGrant {
		cmd.Flags().DurationVar(&wait, "wait", 30*time.Second, "how long to wait for the granted op to start running or end (0: do not wait)")
	}
	return cmd
}

var pastTense = map[events.Decision]string{events.DecisionGrant: "granted", events.DecisionDeny: "denied"}

// resolvedStatus is the exit status of a resolution after which the op
// is in state: a grant is a success only if the op went on to run.
func resolvedStatus(d events.Decision, state events.State) int {
	if d == events.DecisionDeny {
		return exitOK
	}
	switch state {
	case events.StateExecuting, events.StateCompleted:
		return exitOK
	case events.StateHeld, events.StateGranted, events.StateReady:
		return exitPending
	default: // denied on resume, failed before or while running, expired, ambiguous
		return exitDenied
	}
}

// awaitResumed polls op until it is past the grant (executing or ended)
// or wait runs out, and returns where it stands then.
func awaitResumed(ctx context.Context, a *producers.Approver, opID string, wait time.Duration) (*events.Op, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last *events.Op
	for {
		op, err := a.Op(ctx, opID)
		switch {
		case err == nil:
			last = op
			if resolvedStatus(events.DecisionGrant, op.State) != exitPending {
				return op, nil
			}
		case ctx.Err() == nil:
			return nil, err
		}
		select {
		case <-ctx.Done():
			if last == nil || errors.Is(context.Cause(ctx), context.Canceled) {
				return nil, events.Errorf(events.CodeUnavailable, "op %s: no answer from the query service in %s", opID, wait)
			}
			return last, nil
		case <-tick.C:
		}
	}
}

// commandFailed prints a refused command's code and returns exit 1.
func commandFailed(cmd *cobra.Command, err error, asJSON bool) error {
	code := events.CodeOf(err)
	if asJSON {
		printJSON(cmd.OutOrStdout(), map[string]any{"error_code": code, "error": err.Error()})
		return &exitError{code: exitFailed}
	}
	return &exitError{code: exitFailed, err: err}
}

// erased reports whether err says that the request of op is gone because
// op ended: Airlock erases a terminal op's argument plaintext.
func erased(op *events.Op, err error) bool {
	return err != nil && op.State.Terminal() && events.CodeOf(err) == events.CodeRequestUnavailable
}
