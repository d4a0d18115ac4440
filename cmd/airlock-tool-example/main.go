// Command airlock-tool-example is a small tool server for Airlock's remote
// executor (consumers/tools/remote), showing protocol v1 of
// docs/remote.md. Its tool appends a line to a file and returns the file's
// new line count:
//
//	args   {"line": "hello"}
//	result {"lines": 3}
//
// It is idempotent per op id: it records each op in --state (a JSON file,
// synced before every answer), so a second call for an op gets the first
// outcome and appends nothing, across restarts too. It answers status
// queries on <subject>.status from the same records; answering "never"
// records a fence, and the fenced attempt is refused if it ever arrives.
// A record left "started" by a crash makes it answer "unknown": it cannot
// tell whether the line was appended, and says so.
//
// # Running it against airlock serve
//
//	airlock serve --data ./airlock-data &
//	airlock-tool-example --server nats://127.0.0.1:4222 \
//	    --creds ./airlock-data/creds/airlock.creds \
//	    --subject tools.append --state ./append-state.json --out ./append.log
//
// With credentials on (serve's default) the tool server must connect to
// Airlock's NATS account: for now with the service credential
// <data>/creds/airlock.creds, which may do anything; a dedicated tool-server
// role is future work. With `airlock serve --no-auth`, leave out --creds.
// Airlock must run a remote executor for the tool, remote.New(remote.Config{
// Tool: "append", Subject: "tools.append", ...}), registered with its
// executors; see docs/remote.md for how.
//
// It handles one message at a time and keeps every record for ever: an
// example, not a production server.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
)

type options struct {
	server, subject, creds, state, out string
}

func main() {
	var o options
	flag.StringVar(&o.server, "server", envOr("AIRLOCK_SERVER", "nats://127.0.0.1:4222"), "NATS URL of Airlock (env AIRLOCK_SERVER)")
	flag.StringVar(&o.subject, "subject", "tools.append", "subject to serve calls on; status queries on SUBJECT.status")
	flag.StringVar(&o.creds, "creds", "", "nkey seed file to connect with, e.g. <data>/creds/airlock.creds; empty for none")
	flag.StringVar(&o.state, "state", "append-state.json", "file of the per-op records (created if missing)")
	flag.StringVar(&o.out, "out", "append.log", "file the tool appends lines to")
	flag.Parse()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "airlock-tool-example:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends.
func run(ctx context.Context, o options) error {
	opts := []nats.Option{nats.Name("airlock-tool-example"), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond)}
	if o.creds != "" {
		opt, err := nats.NkeyOptionFromSeed(o.creds)
		if err != nil {
			return fmt.Errorf("creds %s: %w", o.creds, err)
		}
		opts = append(opts, opt)
	}
	nc, err := nats.Connect(o.server, opts...)
	if err != nil {
		return fmt.Errorf("connect %s: %w", o.server, err)
	}
	defer nc.Close()
	s, err := open(o.state, o.out, slog.Default())
	if err != nil {
		return err
	}
	l, err := s.listen(nc, o.subject)
	if err != nil {
		return err
	}
	slog.Info("serving", "subject", o.subject, "state", o.state, "out", o.out, "records", len(s.ops))
	return l.run(ctx)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
