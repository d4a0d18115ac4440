package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// exitGarbage is the status the garbage tool exits with.
const exitGarbage = 3

// options are the command-line flags.
type options struct {
	httpAddr        string
	out             string
	calls           string
	pidFile         string
	descriptionFile string
	token           string
}

// main parses the flags and serves until the client goes away or a signal
// arrives.
func main() {
	var o options
	flag.StringVar(&o.httpAddr, "http", "", "serve streamable HTTP at `ADDR` on path /mcp; empty: serve stdio")
	flag.StringVar(&o.out, "out", "", "`FILE` the tools append lines to (required)")
	flag.StringVar(&o.calls, "calls", "", "`FILE` that gets one line per tools/call, synced before its effect (required)")
	flag.StringVar(&o.pidFile, "pid-file", "", "write the process id to `FILE` at start")
	flag.StringVar(&o.descriptionFile, "description-file", "", "the append tool's description is `FILE`'s trimmed content, polled every 100ms")
	flag.StringVar(&o.token, "token", "", "HTTP only: require `TOKEN` as a bearer token")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := o.check(flag.NArg()); err != nil {
		fmt.Fprintln(os.Stderr, "airlock-mcp-example:", err)
		flag.Usage()
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o, log)
	stop()
	if err != nil {
		log.Error("airlock-mcp-example failed", "err", err)
		os.Exit(1)
	}
}

// check reports a missing or inconsistent flag; nargs is the number of
// arguments left after the flags, which must be none.
func (o options) check(nargs int) error {
	switch {
	case nargs > 0:
		return errors.New("unexpected arguments after the flags")
	case o.out == "":
		return errors.New("--out is required")
	case o.calls == "":
		return errors.New("--calls is required")
	case o.token != "" && o.httpAddr == "":
		return errors.New("--token needs --http: stdio has no authentication")
	case strings.ContainsFunc(o.token, isSpace):
		return errors.New("--token must not contain white space: a bearer token is one word")
	}
	return nil
}

// isSpace reports whether r is white space in an Authorization header.
func isSpace(r rune) bool {
	return r == ' ' || r == '\t' || r == '\r' || r == '\n'
}

// run serves the tools on stdio or HTTP until ctx ends or, on stdio, the
// client closes stdin.
func run(ctx context.Context, o options, log *slog.Logger) error {
	description := defaultDescription
	if o.descriptionFile != "" {
		d, err := readDescription(o.descriptionFile)
		if err != nil {
			return err
		}
		description = d
	}
	if o.pidFile != "" {
		if err := writePIDFile(o.pidFile); err != nil {
			return err
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // runs before wg.Wait: the watcher stops first
	stdout := &lockedWriter{w: os.Stdout}
	ts := &toolset{
		store:   &store{out: o.out, calls: o.calls},
		stop:    ctx.Done(),
		garbage: garbageFor(o.httpAddr == "", stdout, log),
		log:     log,
	}
	srv := newServer(ts, description, log)

	if o.descriptionFile != "" {
		wg.Go(func() {
			watchDescription(ctx, o.descriptionFile, description, pollInterval, func(d string) { ts.setDescription(srv, d) }, log)
		})
	}
	log.Info("starting", "pid", os.Getpid(), "out", o.out, "calls", o.calls, "description_file", o.descriptionFile)
	if o.httpAddr == "" {
		return serveStdio(ctx, srv, stdout, log)
	}
	return serveHTTP(ctx, o.httpAddr, o.token, srv, log)
}

// writePIDFile writes the process id to path, through a temporary file
// renamed into place, so a reader never sees a partial file.
func writePIDFile(path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("pid file %s: %w", path, err)
	}
	_, werr := tmp.WriteString(strconv.Itoa(os.Getpid()) + "\n")
	if werr == nil {
		werr = tmp.Chmod(0o644) // CreateTemp makes it 0600
	}
	if err := errors.Join(werr, tmp.Close()); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("pid file %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("pid file %s: %w", path, err)
	}
	return nil
}
