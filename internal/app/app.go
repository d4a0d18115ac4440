// Package app wires Airlock's parts into one process: the embedded (or an
// external) NATS server, the streams, the gate, the executors, the
// projector and its query service. `airlock serve`, the benchmark and the
// tests all start Airlock through Start.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/consumers/gate"
	"github.com/airlock-dev/airlock/consumers/projector"
	"github.com/airlock-dev/airlock/internal/natsrv"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// Config configures one Airlock process.
type Config struct {
	// DataDir holds the JetStream store (embedded server) and the
	// projection. Required.
	DataDir string
	// Listen is the embedded server's client address; empty for
	// in-process connections only.
	Listen string
	// Monitor is the embedded server's HTTP monitoring address; empty for
	// none.
	Monitor string
	// NATSURL connects to an external NATS instead of embedding one.
	NATSURL string
	// NATSOptions are extra options for the connection (credentials).
	NATSOptions []nats.Option
	// SyncAlways makes the embedded server fsync before every ack.
	SyncAlways bool
	// Streams configures the streams.
	Streams streams.Config
	// Policy is the policy spec; executors' classes fill in tools it does
	// not name.
	Policy policy.Spec
	// Executors are registered besides echo.
	Executors []executor.Executor
	// RemoteExecutors tells the gate that executors for other tools run in
	// other processes, so it does not deny tools it has no executor for.
	RemoteExecutors bool
	// ExecutorGroup names the executors' durable consumers; empty for the
	// default. Processes of one group share the work.
	ExecutorGroup string
	// ExecWorkers and ClaimTimeout tune the executors; zero keeps their
	// defaults.
	ExecWorkers  int
	ClaimTimeout time.Duration
	// ProjectorSync fsyncs every projector batch.
	ProjectorSync bool
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Validate checks the config and fills defaults.
func (c *Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("app: DataDir is required")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// App is a running Airlock. Stop it with Shutdown.
type App struct {
	// Server is the embedded server; nil with an external NATS.
	Server *server.Server
	// Conn is the process's own connection.
	Conn *nats.Conn
	// JetStream is the process's JetStream context.
	JetStream jetstream.JetStream
	// Projector is the running projector.
	Projector *projector.Projector
	// Store is the projection.
	Store *store.Store

	policy *policy.Policy
	cancel context.CancelFunc
	group  *errgroup.Group
	svc    interface{ Stop() error }
	done   chan struct{}
	err    error
}

// ClientURL is where NATS clients connect.
func (a *App) ClientURL() string {
	if a.Server != nil {
		return a.Server.ClientURL()
	}
	return a.Conn.ConnectedUrlRedacted()
}

// Start brings Airlock up and returns once every part runs.
func Start(ctx context.Context, cfg Config) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("app: data dir: %w", err)
	}
	a := &App{done: make(chan struct{})}
	if err := a.start(ctx, cfg); err != nil {
		a.close()
		return nil, err
	}
	return a, nil
}

// start brings the parts up; on error the caller closes what it opened.
func (a *App) start(ctx context.Context, cfg Config) (err error) {
	opts := append([]nats.Option{nats.Name("airlock"), nats.MaxReconnects(-1)}, cfg.NATSOptions...)
	if cfg.NATSURL == "" {
		a.Server, err = natsrv.Start(natsrv.Config{
			DataDir: cfg.DataDir, Listen: cfg.Listen, Monitor: cfg.Monitor,
			SyncAlways: cfg.SyncAlways, Logger: cfg.Logger,
		})
		if err != nil {
			return err
		}
		opts = append(opts, nats.InProcessServer(a.Server))
	}
	a.Conn, err = nats.Connect(cfg.NATSURL, opts...)
	if err != nil {
		return fmt.Errorf("app: connect: %w", err)
	}
	a.JetStream, err = jetstream.New(a.Conn, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return err
	}
	if err := streams.Provision(ctx, a.JetStream, cfg.Streams); err != nil {
		return err
	}
	a.Store, err = store.Open(filepath.Join(cfg.DataDir, "projection"))
	if err != nil {
		return err
	}
	reg, err := executor.NewRegistry(append([]executor.Executor{executor.Echo{}}, cfg.Executors...)...)
	if err != nil {
		return err
	}
	spec := cfg.Policy
	tools := reg.Classes()
	for t, c := range spec.Tools {
		tools[t] = c // the policy file wins over an executor's own class
	}
	spec.Tools = tools
	a.policy = policy.New(spec)
	served := map[string]bool{}
	for _, t := range reg.Tools() {
		served[t] = true
	}
	if cfg.RemoteExecutors {
		served = nil
	}
	g, err := gate.New(gate.Config{Conn: a.Conn, JetStream: a.JetStream, Policy: a.policy, Tools: served, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	runner, err := executor.NewRunner(executor.Config{
		JetStream: a.JetStream, Registry: reg, Workers: cfg.ExecWorkers,
		ClaimTimeout: cfg.ClaimTimeout, Group: cfg.ExecutorGroup, Logger: cfg.Logger,
	})
	if err != nil {
		return err
	}
	a.Projector, err = projector.New(projector.Config{JetStream: a.JetStream, Store: a.Store, Sync: cfg.ProjectorSync, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	a.svc, err = projector.Serve(a.Conn, a.Store)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.cancel = cancel
	grp, gctx := errgroup.WithContext(rctx)
	a.group = grp
	grp.Go(func() error { return named("projector", a.Projector.Run(gctx)) })
	grp.Go(func() error { return named("gate", g.Run(gctx)) })
	grp.Go(func() error { return named("executor", runner.Run(gctx)) })
	go func() {
		a.err = grp.Wait()
		close(a.done)
	}()
	cfg.Logger.Info("airlock started", "nats", a.ClientURL(), "data", cfg.DataDir, "tools", reg.Tools())
	return nil
}

func named(part string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", part, err)
	}
	return nil
}

// PolicyHash names the policy the gate decides with.
func (a *App) PolicyHash() string { return a.policy.Hash() }

// Done is closed when a part stopped on its own (an error) or after
// Shutdown.
func (a *App) Done() <-chan struct{} { return a.done }

// Err is the error that stopped the parts, once Done is closed.
func (a *App) Err() error { return a.err }

// Shutdown stops every part, waits for them within ctx, and closes the
// connection, the store and the embedded server. It is idempotent.
func (a *App) Shutdown(ctx context.Context) error {
	if a.cancel != nil {
		a.cancel()
		select {
		case <-a.done:
		case <-ctx.Done():
			return fmt.Errorf("app: shutdown: %w", ctx.Err())
		}
	}
	a.close()
	if errors.Is(a.err, context.Canceled) {
		return nil
	}
	return a.err
}

func (a *App) close() {
	if a.svc != nil {
		_ = a.svc.Stop()
		a.svc = nil
	}
	if a.Conn != nil {
		a.Conn.Close()
		a.Conn = nil
	}
	if a.Store != nil {
		_ = a.Store.Close()
		a.Store = nil
	}
	if a.Server != nil {
		a.Server.Shutdown()
		a.Server.WaitForShutdown()
		a.Server = nil
	}
	if a.cancel == nil {
		close(a.done)
		a.cancel = func() {}
	}
}
