package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// garbageLine is what the garbage tool writes to stdout: not JSON.
const garbageLine = "this is not JSON-RPC: the garbage tool was called\n"

// shutdownTimeout bounds how long an HTTP shutdown waits for requests in
// flight.
const shutdownTimeout = 5 * time.Second

// lockedWriter is stdout for the stdio transport: the SDK writes each
// message with one Write, and the mutex keeps the garbage tool's line from
// landing in the middle of one.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// Write writes p whole, under the lock.
func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Close does nothing: the process's stdout stays open until it exits.
func (l *lockedWriter) Close() error { return nil }

// garbageFor returns what the garbage tool does: over stdio (stdio true)
// it writes garbageLine to stdout, then it exits with exitGarbage.
func garbageFor(stdio bool, stdout *lockedWriter, log *slog.Logger) func() {
	return func() {
		if stdio {
			if _, err := stdout.Write([]byte(garbageLine)); err != nil {
				log.Error("writing garbage to stdout", "err", err)
			}
		}
		os.Exit(exitGarbage)
	}
}

// serveStdio serves srv on stdin and stdout until the client closes stdin
// or ctx ends (which is a clean end too). It does what Server.Run does,
// without Run's error log for a cancelled context.
func serveStdio(ctx context.Context, srv *mcp.Server, stdout *lockedWriter, log *slog.Logger) error {
	ss, err := srv.Connect(ctx, &mcp.IOTransport{Reader: os.Stdin, Writer: stdout}, nil)
	if err != nil {
		return fmt.Errorf("connecting stdio: %w", err)
	}
	log.Info("serving", "transport", "stdio")
	ended := make(chan error, 1)
	go func() { ended <- ss.Wait() }()
	select {
	case err := <-ended:
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("serving stdio: %w", err)
		}
		log.Info("stdin closed: stopped")
	case <-ctx.Done():
		// Close waits for the calls in flight; slow_append stops
		// sleeping when ctx ends. Their answers are not sent: the
		// SDK refuses to write on a closing connection.
		_ = ss.Close()
		<-ended
		log.Info("stopped", "cause", context.Cause(ctx))
	}
	return nil
}

// serveHTTP serves srv with the streamable HTTP transport at addr, path
// /mcp, until ctx ends; it then shuts the HTTP server down. A non-empty
// token is required as a bearer token.
func serveHTTP(ctx context.Context, addr, token string, srv *mcp.Server, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	hs := &http.Server{
		Handler:           newHTTPHandler(srv, token, log),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// The clients' standalone SSE streams never go idle, so Shutdown would
	// wait for them until its timeout: close the sessions, which ends them.
	hs.RegisterOnShutdown(func() { closeSessions(srv, log) })

	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	log.Info("serving", "transport", "http", "url", "http://"+ln.Addr().String()+"/mcp", "auth", token != "")
	select {
	case err := <-served:
		return fmt.Errorf("serving http on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	err = shutdownHTTP(hs, log)
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, fmt.Errorf("serving http on %s: %w", ln.Addr(), serr))
	}
	return err
}

// newHTTPHandler is the mux serving srv on /mcp, behind bearer-token
// authentication if token is not empty.
func newHTTPHandler(srv *mcp.Server, token string, log *slog.Logger) http.Handler {
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Logger: log})
	if token != "" {
		h = auth.RequireBearerToken(tokenVerifier(token), &auth.RequireBearerTokenOptions{})(h)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	return mux
}

// tokenVerifier accepts exactly want, compared in constant time. The
// token info expires an hour ahead, as RequireBearerToken wants an
// expiration; each request is verified again.
func tokenVerifier(want string) auth.TokenVerifier {
	return func(_ context.Context, got string, _ *http.Request) (*auth.TokenInfo, error) {
		if subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
			return nil, fmt.Errorf("%w: not the server's token", auth.ErrInvalidToken)
		}
		return &auth.TokenInfo{Expiration: time.Now().Add(time.Hour)}, nil
	}
}

// shutdownHTTP stops hs gracefully, within shutdownTimeout, and then
// forcibly.
func shutdownHTTP(hs *http.Server, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(ctx); err != nil {
		log.Warn("graceful shutdown incomplete; closing", "err", err)
		if err := hs.Close(); err != nil {
			return fmt.Errorf("closing the http server: %w", err)
		}
	}
	log.Info("stopped")
	return nil
}

// closeSessions closes every session of srv.
func closeSessions(srv *mcp.Server, log *slog.Logger) {
	for _, ss := range slices.Collect(srv.Sessions()) {
		if err := ss.Close(); err != nil {
			log.Warn("closing a session", "session", ss.ID(), "err", err)
		}
	}
}
