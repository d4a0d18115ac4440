package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// defaultServer is where client commands connect unless told otherwise.
const defaultServer = "nats://127.0.0.1:4222"

type globals struct {
	server string
	creds  string
	data   string

	// refuse ends the running command's context with a *refusal when
	// the server refuses a publish or subscribe; see connect.
	refuse context.CancelCauseFunc
	ctx    context.Context
}

// execute runs the command line in os.Args. A command the server refuses
// a publish or subscribe ends at once with that refusal: without it the
// command would wait out its time-out and report that instead.
func execute(ctx context.Context) error {
	g := &globals{}
	g.ctx, g.refuse = context.WithCancelCause(ctx)
	defer g.refuse(nil)
	cmd, err := newRoot(g).ExecuteContextC(g.ctx)
	var ee *exitError
	if err != nil && !errors.As(err, &ee) && cmd != nil && (cmd.ValidateRequiredFlags() != nil || cmd.ValidateFlagGroups() != nil) {
		// cobra's checks of required flags and flag groups: usage.
		err = &exitError{code: exitUsage, err: err}
	}
	if r := g.refused(); r != nil && events.CodeOf(err) != events.CodePermissionDenied {
		// (A command that explained the refusal itself keeps its words.)
		var ee *exitError
		if errors.As(err, &ee) && ee.err == nil {
			// The command printed its outcome (--json) already.
			return err
		}
		return &exitError{code: exitFailed, err: r}
	}
	return err
}

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:           "airlock",
		Short:         "Airlock holds AI-agent tool calls at the door",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: exitUsage, err: err}
	})
	server := os.Getenv("AIRLOCK_SERVER")
	if server == "" {
		server = defaultServer
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.server, "server", server, "NATS URL of Airlock (env AIRLOCK_SERVER)")
	pf.StringVar(&g.creds, "creds", os.Getenv("AIRLOCK_CREDS"), "credential (nkey seed) file to connect with (env AIRLOCK_CREDS); default: the command's role in <data>/creds, if there")
	pf.StringVar(&g.data, "data", envOr("AIRLOCK_DATA", "./airlock-data"), "data directory: where serve keeps its state and client commands find default credentials (env AIRLOCK_DATA)")
	root.AddCommand(newServe(g), newSubmit(g), newOps(g), newBench(), newHolds(g), newCtl(g), newPolicy(), newCreds(g), newAudit(g), newReplay(g), newWatch(g), newMCP(g), newApprovers(g))
	// An unknown subcommand is a usage error too.
	root.Args = usageArgs(cobra.NoArgs)
	root.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	return root
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// credsFor is the credential file a command acting as role connects with:
// --creds, else <data>/creds/<role>.creds when it exists, else none.
func (g *globals) credsFor(role string) string {
	if g.creds != "" {
		return g.creds
	}
	p := filepath.Join(g.data, "creds", role+".creds")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return ""
}

// principal is the name of the principal a credential file belongs to:
// its base name without .creds (as `airlock serve` writes them).
func principal(credsPath, role string) string {
	if credsPath == "" {
		return role
	}
	return strings.TrimSuffix(filepath.Base(credsPath), ".creds")
}

// connect opens a client connection to --server as role. A permissions
// violation (a subject the credential may not use) ends the command at
// once with PERMISSION_DENIED (see refused); a connection the server
// refuses is NO_CREDENTIAL, saying where the command looked.
func (g *globals) connect(role string) (*nats.Conn, error) {
	path := g.credsFor(role)
	opts := []nats.Option{
		nats.Name("airlock-cli"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) && g.refuse != nil {
				g.refuse(g.refusal(role, path, err))
			}
		}),
	}
	if path != "" {
		opt, err := authority.ConnectOption(path)
		if err != nil {
			return nil, err
		}
		opts = append(opts, opt)
	}
	nc, err := nats.Connect(g.server, opts...)
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
		return nil, &exitError{code: exitFailed, err: g.noCredential(role, path)}
	}
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", g.server, err)
	}
	return nc, nil
}

// noCredential explains a connection the server refused.
func (g *globals) noCredential(role, path string) *events.Error {
	if path == "" {
		return events.Errorf(events.CodeNoCredential,
			"%s refused the connection: no credential given (--creds, env AIRLOCK_CREDS) and none at %s; point --data (env AIRLOCK_DATA) at serve's data directory, or --creds at a %s credential",
			g.server, filepath.Join(g.data, authority.CredsDir, role+authority.CredsExt), role)
	}
	return events.Errorf(events.CodeNoCredential,
		"%s refused the credential %s: it is not one of this deployment's principals; use one from serve's data directory (%s), and restart serve after \"airlock creds add\"",
		g.server, path, filepath.Join(authority.CredsDir, "<name>"+authority.CredsExt))
}

// refusal is the error a command ends with when the server refused one
// of its publishes or subscribes.
type refusal struct {
	err *events.Error
	// what was refused: "credential F (principal P, role R) publish to "S""
	what string
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

var violationRE = regexp.MustCompile(`(?i)for (publish|subscription) to "([^"]+)"`)

// refusal says which subject the server refused to which credential, and
// what the command needs instead.
func (g *globals) refusal(role, path string, violation error) *refusal {
	verb, subject := "use", ""
	if m := violationRE.FindStringSubmatch(violation.Error()); m != nil {
		verb, subject = map[string]string{"publish": "publish to", "subscription": "subscribe to"}[strings.ToLower(m[1])], m[2]
	}
	who := "no credential"
	if path != "" {
		who = "credential " + path
		if p, ok := authority.Identify(path); ok {
			who += fmt.Sprintf(" (principal %s, role %s)", p.Name, p.Role)
		}
	}
	what := fmt.Sprintf("%s %s %q", who, verb, subject)
	return &refusal{events.Errorf(events.CodePermissionDenied,
		"the server refused to let %s: this command needs a%s %s credential; pass --creds FILE of a%s %s principal (\"airlock creds list\" shows them)",
		what, article(role), role, article(role), role), what}
}

func article(role string) string {
	if strings.ContainsAny(role[:1], "aeiou") {
		return "n"
	}
	return ""
}

// refused returns the refusal that ended the running command, if one did.
func (g *globals) refused() *refusal {
	if g.ctx == nil {
		return nil
	}
	var r *refusal
	if errors.As(context.Cause(g.ctx), &r) {
		return r
	}
	return nil
}
