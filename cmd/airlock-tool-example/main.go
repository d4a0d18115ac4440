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
