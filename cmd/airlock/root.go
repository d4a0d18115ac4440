package main

import (
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// defaultServer is where client commands connect unless told otherwise.
const defaultServer = "nats://127.0.0.1:4222"

type globals struct {
	server string
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
	root.PersistentFlags().StringVar(&g.server, "server", server, "NATS URL of Airlock (env AIRLOCK_SERVER)")
	root.AddCommand(newServe(), newSubmit(g), newOps(g), newBench())
	// An unknown subcommand is a usage error too.
	root.Args = usageArgs(cobra.NoArgs)
	root.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	return root
}

// connect opens a client connection to --server.
func (g *globals) connect() (*nats.Conn, error) {
	nc, err := nats.Connect(g.server, nats.Name("airlock-cli"))
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", g.server, err)
	}
	return nc, nil
}
