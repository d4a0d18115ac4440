package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

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
}

func newRoot() *cobra.Command {
	g := &globals{}
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
	root.AddCommand(newServe(g), newSubmit(g), newOps(g), newBench(), newHolds(g), newCtl(g), newPolicy(), newCreds(g), newAudit(g), newReplay(g), newWatch(g))
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
// violation (a subject the credential may not use) is reported on stderr
// as it happens; the request then times out.
func (g *globals) connect(role string) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name("airlock-cli"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				fmt.Fprintln(os.Stderr, "airlock:", err)
			}
		}),
	}
	if path := g.credsFor(role); path != "" {
		opt, err := authority.ConnectOption(path)
		if err != nil {
			return nil, err
		}
		opts = append(opts, opt)
	}
	nc, err := nats.Connect(g.server, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", g.server, err)
	}
	return nc, nil
}
