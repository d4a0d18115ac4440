package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/approvers"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
)

// inboxOriginFile is where serve --ui records the inbox's origin, for
// approvers add to print whole links.
const inboxOriginFile = "inbox.origin"

func writeInboxOrigin(dataDir, origin string) error {
	return os.WriteFile(filepath.Join(dataDir, inboxOriginFile), []byte(origin+"\n"), 0o600)
}

func readInboxOrigin(dataDir string) string {
	b, err := os.ReadFile(filepath.Join(dataDir, inboxOriginFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// approverStore connects as the service, whose credential is in the data
// dir: only the service account has the approvers bucket.
func (g *globals) approverStore(ctx context.Context) (*approvers.Store, func(), error) {
	if g.credsFor(authority.ServiceName) == "" && g.creds == "" {
		return nil, nil, fmt.Errorf("no service credential in %s: run this where airlock serve's data dir is (--data), or give --creds %s.creds", filepath.Join(g.data, authority.CredsDir), authority.ServiceName)
	}
	nc, err := g.connect(authority.ServiceName)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	st, err := approvers.Open(ctx, js, nil)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return st, nc.Close, nil
}

// withApprovers runs fn with the deployment's approvers bucket, within
// 10 seconds.
func (g *globals) withApprovers(fn func(ctx context.Context, cmd *cobra.Command, st *approvers.Store, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
		defer cancel()
		st, done, err := g.approverStore(ctx)
		if err != nil {
			return err
		}
		defer done()
		return fn(ctx, cmd, st, args)
	}
}

func newApproversAdd(g *globals) *cobra.Command {
	var ws []string
	var ttl time.Duration
	var origin string
	cmd := &cobra.Command{
		Use:   "add NAME --ws WS[,WS...]",
		Short: "Make an inbox approver (or give one more workspaces) and print a single-use enrollment link",
		Long: `Make an approver of the inbox (airlock serve --ui) who may see and
resolve the holds of the workspaces given, and print a link that enrolls
a passkey for it, once, until --ttl. Give the link to the approver only:
whoever opens it first enrolls. Adding an existing approver adds the
workspaces and prints a new link, for another passkey.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if !authority.ValidName(name) {
				return usageError("approver name %q: want [a-z0-9][a-z0-9_-]{0,63}", name)
			}
			for _, w := range ws {
				if !events.ValidName(w) {
					return usageError("workspace %q is not a workspace name", w)
				}
			}
			if err := g.notAnotherRole(name); err != nil {
				return err
			}
			return g.withApprovers(func(ctx context.Context, cmd *cobra.Command, st *approvers.Store, _ []string) error {
				return addApprover(ctx, cmd, st, g.data, name, ws, ttl, origin)
			})(cmd, args)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&ws, "ws", nil, "the workspaces the approver may resolve in (repeat or comma-separate)")
	f.DurationVar(&ttl, "ttl", approvers.DefaultEnrollTTL, fmt.Sprintf("how long the enrollment link works; at most %s", approvers.MaxEnrollTTL))
	f.StringVar(&origin, "origin", "", "the inbox's origin, for the link; default what serve --ui recorded in the data dir")
	_ = cmd.MarkFlagRequired("ws")
	return cmd
}

// addApprover makes or extends an approver and prints its enrollment
// link.
func addApprover(ctx context.Context, cmd *cobra.Command, st *approvers.Store, data, name string, ws []string, ttl time.Duration, origin string) error {
	a, token, err := st.Add(ctx, name, ws, ttl)
	if err != nil {
		return err
	}
	if origin == "" {
		origin = readInboxOrigin(data)
	}
	link := "/enroll/" + token
	if origin != "" {
		link = origin + link
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "approver %s may resolve in: %s (%d passkeys enrolled)\n", a.Name, strings.Join(a.Workspaces, ", "), len(a.Passkeys))
	fmt.Fprintf(w, "enrollment link (works once, until %s):\n%s\n", time.Now().Add(ttl).UTC().Format(time.RFC3339), link)
	if origin == "" {
		fmt.Fprintln(w, "(the inbox's origin is not known here: prefix the link with it, or give --origin)")
	}
	return nil
}

// notAnotherRole refuses an approver name that a principal of another
// role (an agent above all) has: nobody approves under an agent's name.
func (g *globals) notAnotherRole(name string) error {
	if _, err := os.Stat(filepath.Join(g.data, authority.CredsDir, "principals.json")); err != nil {
		return nil // no principals here to clash with
	}
	set, err := authority.Ensure(g.data)
	if err != nil {
		return err
	}
	if p, ok := set.Lookup(name); ok && p.Role != authority.RoleApprover {
		return usageError("%s is the name of a principal with role %s: an approver needs a name of its own", name, p.Role)
	}
	return nil
}

func newApproversList(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the inbox's approvers, their workspaces and passkeys",
		Args:  usageArgs(cobra.NoArgs),
		RunE: g.withApprovers(func(ctx context.Context, cmd *cobra.Command, st *approvers.Store, _ []string) error {
			accounts, err := st.Accounts(ctx)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tWORKSPACES\tPASSKEYS\tCREATED")
			for _, a := range accounts {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", a.Name, strings.Join(a.Workspaces, ","), len(a.Passkeys), a.CreatedAt.Format(time.RFC3339))
			}
			return tw.Flush()
		}),
	}
}

func newApproversRemove(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove an inbox approver: its passkeys resolve nothing from then on",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: g.withApprovers(func(ctx context.Context, cmd *cobra.Command, st *approvers.Store, args []string) error {
			if err := st.Remove(ctx, args[0]); errors.Is(err, approvers.ErrNotFound) {
				return fmt.Errorf("no inbox approver %s (airlock approvers list lists them)", args[0])
			} else if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "approver %s removed\n", args[0])
			return nil
		}),
	}
}
