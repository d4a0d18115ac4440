package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/inbox"
	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/consumers/gate"
	"github.com/airlock-dev/airlock/consumers/projector"
	"github.com/airlock-dev/airlock/consumers/tools/mcp"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/approvers"
	"github.com/airlock-dev/airlock/internal/archive"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/handoff"
	"github.com/airlock-dev/airlock/internal/livefeed"
	"github.com/airlock-dev/airlock/internal/metrics"
	"github.com/airlock-dev/airlock/internal/natsrv"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/results"
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
	// Streams configures the streams. Its Live is ignored: LiveFeed
	// decides.
	Streams streams.Config
	// LiveFeed says when the ops stream republishes on airlock.v1.live.>
	// (internal/livefeed): empty for the default, livefeed.Auto (only
	// while someone subscribes) on the embedded server and livefeed.On
	// with an external NATS, which allows On only.
	LiveFeed livefeed.Mode
	// PolicyFile, when set, is the policy (YAML or JSON), complete: a tool
	// it does not name is destructive. Policy must then be empty.
	// ReloadPolicy reads it again.
	PolicyFile string
	// Policy is the policy spec when there is no PolicyFile; executors'
	// classes fill in tools it does not name.
	Policy policy.Spec
	// Auth makes the embedded server admit only the principals of
	// DataDir/creds (created on first start) with their role's
	// permissions, and Airlock connect as its own service principal; with
	// an external NATS, Airlock connects with DataDir/creds/airlock.creds
	// and records resolutions and controls by the principals listed there.
	Auth bool
	// Tools configures the built-in tools exec, apply_patch and remote.
	Tools ToolsConfig
	// HoldExpiryInterval is how often held ops are checked for expiry,
	// and how often the gate forgets the requests it kept of expired
	// holds; zero for the defaults (1s; a minute for the gate).
	HoldExpiryInterval time.Duration
	// Clock tells the time for holds and controls; default time.Now.
	Clock func() time.Time
	// Executors are registered besides echo.
	Executors []executor.Executor
	// ExecutorGroup names the executors' durable consumers; empty for the
	// default. Processes of one group share the work.
	ExecutorGroup string
	// ExecutorWorkspaces, when set, are the only workspaces this process's
	// executors serve (their roots are on this host); every process of
	// the group must name the same ones. Nil serves every workspace.
	ExecutorWorkspaces []string
	// StartTimeout bounds how long Start waits for JetStream (a cluster
	// electing its leaders, other processes provisioning the same streams)
	// before it gives up; zero for DefaultStartTimeout.
	StartTimeout time.Duration
	// ExecWorkers and ClaimTimeout tune the executors; zero keeps their
	// defaults.
	ExecWorkers  int
	ClaimTimeout time.Duration
	// GateDecidesAll: the gate starts no op itself; every allowed op is
	// decided, and taken by an executor consumer (of this process or
	// another). By default the gate starts the ops whose tool this
	// process serves, in one event instead of two (ADR 0025).
	GateDecidesAll bool
	// OwnerWait is how long a process waits for the instance that made a
	// lost attempt, which only that instance's records can settle, to come
	// back before it ends the op ambiguous; zero for 10s.
	OwnerWait time.Duration
	// ProjectorSync fsyncs every projector batch.
	ProjectorSync bool
	// ScrubInterval is how often the scrubber looks for terminal ops
	// whose request is still stored; zero for the default (250ms).
	ScrubInterval time.Duration
	// ScrubSecureBacklog: a scrubber sweep with more requests to erase
	// than this deletes them instead of erasing each with a secure delete
	// (ADR 0010); zero for the default (16), -1 to always erase securely.
	ScrubSecureBacklog int
	// CheckpointEvery and CheckpointInterval tune the audit log's
	// checkpoints; zero keeps the projector's defaults.
	CheckpointEvery    int
	CheckpointInterval time.Duration
	// AuditOverride starts even when the audit log fails verification at
	// start (logged as an error, and kept in AuditReport). Without it such
	// a start fails with an *AuditError.
	AuditOverride bool
	// ResultTTL is how long a completed op's result is kept, sealed to
	// the agent that asked, in workspaces whose policy says nothing;
	// 0 for events.DefaultResultTTL, negative to keep none.
	// ResultEraseOnDelivery erases each as soon as the agent has it.
	ResultTTL             time.Duration
	ResultEraseOnDelivery bool
	// ResultRetainBytes bounds the result bytes one workspace keeps (the
	// oldest go first); 0 for events.DefaultRetainedBytes, negative for
	// no bound.
	ResultRetainBytes int64
	// NoAuditLog keeps no audit log: only for benchmarks that measure
	// what the log costs.
	NoAuditLog bool
	// MetricsListen is where /metrics, /healthz and /readyz are served
	// (host:port, port 0 for any); empty for nowhere. The metrics are kept
	// either way (App.Metrics).
	MetricsListen string
	// UIListen is where the approver inbox is served (host:port, port 0
	// for any); empty for nowhere. UIOrigin is its public origin, what
	// browsers see (https://host, or http://localhost:PORT); empty for
	// http://localhost and UIListen's port.
	UIListen, UIOrigin string
	// ArchiveAfter is how long an ended op's events stay in the ops stream
	// once applied, before they leave it for the archive (ADR 0026); zero
	// for projector.DefaultArchiveAfter. Only a stream made with
	// Streams.PurgeOps lets them go.
	ArchiveAfter time.Duration
	// ReadyMaxLag is the projector lag, in ops stream messages, beyond
	// which /readyz says not ready; zero for metrics.DefaultMaxLag.
	ReadyMaxLag uint64
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// DefaultStartTimeout is Config.StartTimeout's default.
const DefaultStartTimeout = 2 * time.Minute

// EnsureDefaults fills in the defaults of what is unset.
func (c *Config) EnsureDefaults() {
	if c.StartTimeout == 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks the config, as EnsureDefaults left it; it changes
// nothing.
func (c *Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("app: DataDir is required")
	}
	if c.StartTimeout < 0 {
		return fmt.Errorf("app: StartTimeout %s is negative", c.StartTimeout)
	}
	if c.ResultTTL > 0 {
		if err := events.ValidTTL(c.ResultTTL); err != nil {
			return fmt.Errorf("app: %w", err)
		}
	}
	return nil
}

// retention is the results the gate keeps where the policy says nothing.
func (c *Config) retention() *events.Retention {
	switch {
	case c.ResultTTL < 0:
		return &events.Retention{}
	case c.ResultTTL == 0:
		return &events.Retention{TTLSeconds: int64(events.DefaultResultTTL / time.Second), EraseOnDelivery: c.ResultEraseOnDelivery}
	}
	return &events.Retention{TTLSeconds: int64(c.ResultTTL / time.Second), EraseOnDelivery: c.ResultEraseOnDelivery}
}

// App is a running Airlock. Stop it with Shutdown.
type App struct {
	// Server is the embedded server; nil with an external NATS.
	Server *server.Server
	// Conn is the process's own connection.
	Conn *nats.Conn
	// projConn is the projector's connection.
	projConn *nats.Conn
	// JetStream is the process's JetStream context.
	JetStream jetstream.JetStream
	// Projector is the running projector.
	Projector *projector.Projector
	// opsPurger lets archived ops leave the ops stream; nil when the
	// stream denies purges.
	opsPurger *projector.OpsPurger
	// archiveStats are the archive's counts for the metrics; nil without
	// an archive.
	archiveStats metrics.ArchiveStats
	// Store is the projection.
	Store *store.Store

	// Results keeps completed ops' results, sealed to the agents that
	// asked; Eraser erases them when their retention ends.
	Results *results.Store
	Eraser  *projector.Eraser
	// Authority is the principals of DataDir when Auth is on.
	Authority *authority.Set
	// AuditKey signs the audit log's checkpoints.
	AuditKey *audit.Key
	// AuditReport is what verifying the audit log at start found.
	AuditReport *audit.Report
	// Metrics is the process's Prometheus registry and health checks.
	Metrics *metrics.Metrics
	// Handoff passes admitted ops' args from the gate to the runner.
	Handoff *handoff.Args
	// Live turns the live feed on and off.
	Live *livefeed.Feed
	// Instance is the data dir's instance id, which this process's claims
	// carry.
	Instance string
	// Approvers keeps the inbox's approver accounts, their passkeys,
	// links and sessions.
	Approvers *approvers.Store

	cfg    Config
	gate   *gate.Gate
	cancel context.CancelFunc
	group  *errgroup.Group
	svc    interface{ Stop() error }
	// upstreams are the MCP servers behind Airlock, closed with it;
	// mcpClasses the classes of their tools, by Airlock tool name.
	upstreams   []*mcp.Upstream
	mcpClasses  map[string]string
	mcpCalls    *upstreamCalls
	tempDirs    []string // removed at shutdown
	metricsHTTP httpPart
	inbox       *inbox.Server
	ui          httpPart
	uiOrigin    string
	done        chan struct{}
	err         error
	// walk is the audit log's walk, begun as the store opens.
	walk *logWalk
}

// MetricsAddr is where /metrics is served; empty when it is not.
func (a *App) MetricsAddr() string { return a.metricsHTTP.addr() }

// ClientURL is where NATS clients connect.
func (a *App) ClientURL() string {
	if a.Server != nil {
		return a.Server.ClientURL()
	}
	return a.Conn.ConnectedUrlRedacted()
}

// shutdownWait bounds how long a failed Start waits for the parts it
// started to stop.
const shutdownWait = 30 * time.Second

// Start brings Airlock up and returns once every part runs.
func Start(ctx context.Context, cfg Config) (*App, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("app: data dir: %w", err)
	}
	a := &App{done: make(chan struct{}), cfg: cfg}
	if err := a.start(ctx, cfg); err != nil {
		if a.cancel != nil {
			// The parts run (start gave up waiting for the gate): stop
			// them before their connection and store close under them.
			a.cancel()
			select {
			case <-a.done:
			case <-time.After(shutdownWait):
				cfg.Logger.Error("parts still running after a failed start; closing anyway")
			}
		}
		a.close()
		return nil, err
	}
	return a, nil
}

// start brings the parts up; on error the caller closes what it opened.
func (a *App) start(ctx context.Context, cfg Config) (err error) {
	if a.Instance, err = loadInstance(cfg.DataDir); err != nil {
		return err
	}
	// A first start makes the audit key beside the credentials, before it
	// connects: a deployment's further data dirs take a copy of both
	// (deploy/README.md).
	if err := firstAuditKey(cfg.DataDir, cfg.Logger); err != nil {
		return err
	}
	if a.Store, err = store.Open(filepath.Join(cfg.DataDir, StoreDir)); err != nil {
		return err
	}
	opts := append([]nats.Option{nats.Name("airlock"), nats.MaxReconnects(-1), nats.ErrorHandler(asyncErrors(cfg.Logger))}, cfg.NATSOptions...)
	var authFile string
	if cfg.Auth {
		if a.Authority, err = authority.Ensure(cfg.DataDir); err != nil {
			return err
		}
		// The accounts, users and permissions: the embedded server loads
		// them from this file, and an external server includes it.
		authFile = filepath.Join(cfg.DataDir, authority.AuthConfigFile)
		if err := a.Authority.WriteServerConfig(authFile); err != nil {
			return err
		}
		opt, err := authority.ConnectOption(a.Authority.CredsPath(authority.ServiceName))
		if err != nil {
			return err
		}
		opts = append(opts, opt)
	}
	if cfg.NATSURL == "" {
		// Before the server reads them: a record that fails its checksum
		// is found now, not when (if ever) its block is loaded again.
		start := time.Now()
		blocks, err := natsrv.CheckBlocks(filepath.Join(cfg.DataDir, natsrv.StoreDir), true, streams.WrittenByAirlock)
		if err != nil {
			return fmt.Errorf("app: %w: %v", audit.ErrUnreadable, err)
		}
		if blocks > 0 {
			cfg.Logger.Info("stream blocks checked", "blocks", blocks, "took", time.Since(start).Round(time.Millisecond))
		}
		// The audit log is walked while the server recovers its streams
		// (one core's work, most of it); the checkpoints JetStream keeps
		// are checked against the walked log once they are read
		// (checkAuditLog). Beside the blocks' check (both cores) it would
		// only slow it.
		a.walk = walkAuditLog(cfg.DataDir, a.Store)
		a.Server, err = natsrv.Start(natsrv.Config{
			DataDir: cfg.DataDir, Listen: cfg.Listen, Monitor: cfg.Monitor,
			SyncAlways: cfg.SyncAlways, Logger: cfg.Logger, AuthFile: authFile,
		})
		if err != nil {
			return err
		}
		opts = append(opts, nats.InProcessServer(a.Server))
	} else {
		a.walk = walkAuditLog(cfg.DataDir, a.Store)
	}
	a.Conn, err = nats.Connect(cfg.NATSURL, opts...)
	if err != nil {
		return fmt.Errorf("app: connect: %w", err)
	}
	a.JetStream, err = jetstream.New(a.Conn, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return err
	}
	account := server.DEFAULT_GLOBAL_ACCOUNT
	if cfg.Auth {
		account = authority.ServiceAccount
	}
	a.Live, err = livefeed.New(livefeed.Config{
		JetStream: a.JetStream, Mode: cfg.LiveFeed, Server: a.Server, Account: account, Logger: cfg.Logger,
	})
	if err != nil {
		return err
	}
	// Everything Start asks of JetStream waits, within StartTimeout, for
	// a cluster that is still electing its leaders or being provisioned
	// by another process at the same moment.
	sctx, scancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer scancel()
	sc := cfg.Streams
	sc.Live = a.Live.Wanted()
	if err := streams.Await(sctx, cfg.Logger, "provisioning the streams", func(ctx context.Context) error {
		return streams.Provision(ctx, a.JetStream, sc)
	}); err != nil {
		return fmt.Errorf("app: %w", err)
	}
	if a.Approvers, err = approvers.Open(sctx, a.JetStream, cfg.Clock); err != nil {
		return err
	}
	checkpoints, err := a.checkAuditLog(sctx, cfg)
	if err != nil {
		return err
	}
	tools, err := a.builtinTools(sctx, cfg)
	if err != nil {
		return err
	}
	reg, err := executor.NewRegistry(append(tools, cfg.Executors...)...)
	if err != nil {
		return err
	}
	pol, source, err := loadPolicy(cfg, reg, a.mcpClasses)
	if err != nil {
		return err
	}
	transitions := metrics.NewTransitions()
	// The projector reads every op event: on a connection of its own, its
	// deliveries do not queue behind the gate's and runner's acknowledgements
	// in one read loop (docs/performance.md, "The projector's connection").
	if a.projConn, err = nats.Connect(cfg.NATSURL, append(opts, nats.Name("airlock projector"))...); err != nil {
		return fmt.Errorf("app: connect the projector: %w", err)
	}
	pjs, err := jetstream.New(a.projConn)
	if err != nil {
		return err
	}
	pcfg := projector.Config{
		JetStream: pjs, Store: a.Store, Sync: cfg.ProjectorSync, Logger: cfg.Logger,
		AuditKey: a.AuditKey, Checkpoints: checkpoints,
		CheckpointEvery: cfg.CheckpointEvery, CheckpointInterval: cfg.CheckpointInterval,
		AnchorDir:  cfg.DataDir,
		NoAuditLog: cfg.NoAuditLog, Observer: transitions,
	}
	// Ended ops leave the ops stream for the archive when the stream
	// allows purges (ADR 0026): a stream made by an earlier version keeps
	// every op, and nothing here changes.
	archiving, keep, err := opsArchived(sctx, a.JetStream)
	if err != nil {
		return err
	}
	if archiving {
		pcfg.Archive, pcfg.WriteArchive = archive.New(pjs), true
	}
	if a.Projector, err = projector.New(pcfg); err != nil {
		return err
	}
	var archived *projector.Archived
	if archiving {
		archived = projector.NewArchived(a.Projector, a.Store, a.JetStream, keep)
		if a.opsPurger, err = projector.NewOpsPurger(projector.OpsPurgerConfig{
			JetStream: a.JetStream, Store: a.Store, Projector: a.Projector, After: cfg.ArchiveAfter, Keep: keep, Logger: cfg.Logger,
		}); err != nil {
			return err
		}
		a.archiveStats = archiveStats{Projector: a.Projector, OpsPurger: a.opsPurger, Archived: archived}
	}
	// The gate hands the args of ops it admits to this process's runner.
	a.Handoff = handoff.New(0, 0)
	args := a.Handoff
	served := streams.NewServed(a.JetStream, cfg.Logger)
	if a.Results, err = a.resultStore(cfg); err != nil {
		return err
	}
	gcfg := gate.Config{
		Conn: a.Conn, JetStream: a.JetStream, Policy: pol, PolicySource: source,
		Served: served.Serves, Local: localServes(reg, cfg.ExecutorWorkspaces),
		Clock: cfg.Clock, Logger: cfg.Logger, Operands: operandsOf(reg), Handoff: args,
		Results: a.Results, Retention: cfg.retention(), HoldSweep: cfg.HoldExpiryInterval,
	}
	if a.Authority != nil {
		gcfg.Principals = a.principal
	}
	if archived != nil {
		gcfg.Archived = archived
	}
	expirer, err := projector.NewExpirer(projector.ExpirerConfig{
		JetStream: a.JetStream, Store: a.Store, Interval: cfg.HoldExpiryInterval, Clock: cfg.Clock, Logger: cfg.Logger,
	})
	if err != nil {
		return err
	}
	runner, err := executor.NewRunner(executor.Config{
		JetStream: a.JetStream, Registry: reg, Workers: cfg.ExecWorkers,
		ClaimTimeout: cfg.ClaimTimeout, Group: cfg.ExecutorGroup, Workspaces: cfg.ExecutorWorkspaces,
		Instance: a.Instance, Logger: cfg.Logger, Handoff: args, OwnerTries: ownerTries(cfg.OwnerWait),
		Results: a.Results, Archived: runnerArchived(archived),
	})
	if err != nil {
		return err
	}
	// The gate starts the ops it allows for tools served here itself
	// (ADR 0025), and holds their requests while they run: a request left
	// by a process that is gone comes back after the claim timeout, as a
	// decided event would.
	if !cfg.GateDecidesAll {
		gcfg.Starter, gcfg.AckWait = runner, cfg.ClaimTimeout
	}
	if a.gate, err = gate.New(gcfg); err != nil {
		return err
	}
	// The executors' consumers exist before the gate decides anything: it
	// learns from them which tools and workspaces are served.
	if err := runner.Provision(sctx); err != nil {
		return fmt.Errorf("app: %w", err)
	}
	if a.Server != nil {
		// The embedded server has no other consumer than this process:
		// whatever is delivered and unacknowledged was left by its
		// previous life. Delivered again now, its claims are recovered
		// at once instead of one claim timeout after the crash.
		for _, st := range []string{streams.Requests, streams.Ops} {
			if _, err := streams.RedeliverOrphans(sctx, a.Conn, a.JetStream, st, cfg.Logger); err != nil {
				cfg.Logger.Warn("left to redelivery after the claim timeout", "err", err)
			}
		}
	}
	scrubber, err := projector.NewScrubber(projector.ScrubberConfig{
		JetStream: a.JetStream, Store: a.Store, Interval: cfg.ScrubInterval, Logger: cfg.Logger,
		SecureBacklog: cfg.ScrubSecureBacklog,
	})
	if err != nil {
		return err
	}
	a.Eraser, err = projector.NewEraser(projector.EraserConfig{
		JetStream: a.JetStream, Store: a.Store, Results: a.Results, RetainedBytes: cfg.ResultRetainBytes,
		Interval: cfg.HoldExpiryInterval, Clock: cfg.Clock, Logger: cfg.Logger,
	})
	if err != nil {
		return err
	}
	a.Metrics, err = metrics.New(metrics.Config{
		Store: a.Store, Projector: a.Projector, JetStream: a.JetStream, Transitions: transitions,
		AuditStatus: a.auditStatus, Running: a.running, MaxLag: cfg.ReadyMaxLag, Logger: cfg.Logger, Live: a.Live,
		Results: a.Eraser, Archive: a.archiveStats,
	})
	if err != nil {
		return err
	}
	if a.mcpCalls != nil {
		if err := a.Metrics.Registry().Register(a.mcpCalls.h); err != nil {
			return fmt.Errorf("app: metrics: %w", err)
		}
	}
	if cfg.MetricsListen != "" {
		if err := a.metricsHTTP.listen(cfg.MetricsListen, &http.Server{Handler: a.Metrics.Handler(), ReadHeaderTimeout: 5 * time.Second}); err != nil {
			return fmt.Errorf("app: metrics: %w", err)
		}
	}
	if err := a.startUI(sctx, cfg); err != nil {
		return err
	}
	notifier, err := a.notifier(cfg)
	if err != nil {
		return err
	}
	svc, err := projector.Serve(a.Conn, a.Store, a.AuditKey, a.Live.Sync, a.Projector.CaughtUp)
	if err != nil {
		return err
	}
	a.svc = svc
	if err := projector.ServeResults(svc, a.Conn, a.Store, a.Results, a.JetStream); err != nil {
		return err
	}
	if err := a.serveTools(svc, reg); err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.cancel = cancel
	grp, gctx := errgroup.WithContext(rctx)
	a.group = grp
	grp.Go(func() error { return named("projector", a.Projector.Run(gctx)) })
	grp.Go(func() error { return named("gate", a.gate.Run(gctx)) })
	grp.Go(func() error { return named("expirer", expirer.Run(gctx)) })
	grp.Go(func() error { return named("scrubber", scrubber.Run(gctx)) })
	grp.Go(func() error { return named("eraser", a.Eraser.Run(gctx)) })
	grp.Go(func() error { return named("executor", runner.Run(gctx)) })
	grp.Go(func() error { return named("advisories", a.Metrics.Run(gctx)) })
	grp.Go(func() error { return named("live feed", a.Live.Run(gctx)) })
	grp.Go(func() error { return named("notifier", notifier.Run(gctx)) })
	if a.opsPurger != nil {
		grp.Go(func() error { return named("ops purger", a.opsPurger.Run(gctx)) })
	}
	// Outside the group: /readyz keeps answering (not ready) when a part
	// stops, until Shutdown.
	a.metricsHTTP.serve(cfg.Logger, "metrics server")
	a.ui.serve(cfg.Logger, "inbox")
	go func() {
		a.err = grp.Wait()
		close(a.done)
	}()
	select {
	case <-a.gate.Ready():
	case <-a.done:
		return fmt.Errorf("app: gate: %w", a.err)
	case <-sctx.Done():
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("app: the gate did not come up within the start timeout (%s): JetStream did not answer", cfg.StartTimeout)
	}
	cfg.Logger.Info("airlock started", "nats", a.ClientURL(), "data", cfg.DataDir, "instance", a.Instance, "tools", reg.Tools(),
		"executor_group", cfg.ExecutorGroup, "workspaces", cfg.ExecutorWorkspaces)
	return nil
}

// asyncErrors logs what the connection reports out of band: a
// subscription too slow for its messages (they are dropped), a permission
// refused.
func asyncErrors(l *slog.Logger) nats.ErrHandler {
	return func(_ *nats.Conn, sub *nats.Subscription, err error) {
		if sub != nil {
			l.Warn("nats: asynchronous error", "subject", sub.Subject, "err", err)
			return
		}
		l.Warn("nats: asynchronous error", "err", err)
	}
}

// running says whether every part still runs (readiness).
func (a *App) running() error {
	select {
	case <-a.done:
		if a.err != nil {
			return fmt.Errorf("stopped: %w", a.err)
		}
		return errors.New("stopped")
	default:
		return nil
	}
}

// auditStatus says whether the audit log verified at start (readiness).
func (a *App) auditStatus() (bool, string) {
	r := a.AuditReport
	if r == nil {
		return false, "not verified"
	}
	if r.OK() {
		return true, fmt.Sprintf("verified %d leaves at start", r.Size)
	}
	return false, fmt.Sprintf("failed verification at start (%s); started with --unsafe-audit-override", r.Status)
}

func named(part string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", part, err)
	}
	return nil
}

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
	for _, u := range a.upstreams {
		_ = u.Close()
	}
	a.upstreams = nil
	for _, d := range a.tempDirs {
		_ = os.RemoveAll(d)
	}
	a.tempDirs = nil
	if a.svc != nil {
		_ = a.svc.Stop()
		a.svc = nil
		if a.Results != nil {
			_ = a.Results.Close()
		}
	}
	a.ui.stop()
	if a.inbox != nil {
		_ = a.inbox.Close()
		a.inbox = nil
	}
	a.metricsHTTP.stop()
	if a.Metrics != nil {
		a.Metrics.Close() // waits for scrapes reading the store
	}
	if a.Conn != nil {
		a.Conn.Close()
		a.Conn = nil
	}
	if a.projConn != nil {
		a.projConn.Close()
		a.projConn = nil
	}
	if a.Store != nil {
		a.walk.wait() // a start that failed early: the walk reads the store
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

// resultStore is where results are kept: sealed to each agent's own
// nkey with credentials on, to the deployment's key with --no-auth.
func (a *App) resultStore(cfg Config) (*results.Store, error) {
	if a.Authority != nil {
		keys := &results.NkeyKeys{Lookup: func(agent string) (string, bool) {
			p, ok := a.Authority.Lookup(agent)
			if !ok || p.Role != authority.RoleAgent {
				return "", false
			}
			return p.PublicKey, true
		}}
		return results.New(a.JetStream, keys, nil, cfg.Logger).WithClock(cfg.Clock), nil
	}
	own, err := results.DeploymentKey(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	return results.New(a.JetStream, results.DeploymentKeys{Opener: own}, own, cfg.Logger).WithClock(cfg.Clock), nil
}

var _ projector.Observer = (*metrics.Transitions)(nil)

// opsArchived reports whether the ops stream lets ended ops leave it for
// the archive: whether it allows purges (ADR 0026); and how many of its
// newest messages its purges keep (ADR 0030).
func opsArchived(ctx context.Context, js jetstream.JetStream) (bool, uint64, error) {
	st, err := js.Stream(ctx, streams.Ops)
	if err != nil {
		return false, 0, fmt.Errorf("app: %w", err)
	}
	sc := st.CachedInfo().Config
	return !sc.DenyPurge, streams.OpsArchiveKeep(sc), nil
}

// runnerArchived is a as the runner takes it: a nil interface for none.
func runnerArchived(a *projector.Archived) executor.Archived {
	if a == nil {
		return nil
	}
	return a
}

// archiveStats are the counts of the archive of ended ops (ADR 0026) the
// metrics read: the projector's, the purger's and the settles'.
type archiveStats struct {
	*projector.Projector
	*projector.OpsPurger
	*projector.Archived
}

// OpsPurgedBelow is the floor of this process's last purge of ended ops'
// events from the ops stream (ADR 0026): every op event below it has
// left. Zero when ended ops stay in the stream, or before a purge.
func (a *App) OpsPurgedBelow() uint64 {
	if a.opsPurger == nil {
		return 0
	}
	return a.opsPurger.Floor()
}

// Settles counts the settles of first events that read the ops floor, and
// those the projection answered alone (ADR 0028, ADR 0030); zero when
// ended ops stay in the ops stream.
func (a *App) Settles() (read, answered uint64) {
	if a.archiveStats == nil {
		return 0, 0
	}
	return a.archiveStats.Settles()
}
