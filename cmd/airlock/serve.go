package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/mcpgw"
	"github.com/airlock-dev/airlock/consumers/projector"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/livefeed"
	"github.com/airlock-dev/airlock/internal/metrics"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/spf13/cobra"
)

// minDedupeWindow is the shortest --dedupe-window: at least the gate's
// AckWait (30s), so a request redelivered after a lost ack is still
// recognised by its Nats-Msg-Id.
const minDedupeWindow = time.Minute

// shutdownTimeout bounds a clean shutdown after SIGINT or SIGTERM.
const shutdownTimeout = 30 * time.Second

func newServe(g *globals) *cobra.Command {
	var (
		cfg        app.Config
		fsync      string
		logLevel   string
		wsModes    map[string]string
		noAuth     bool
		keepOps    bool
		resultTTL  time.Duration
		liveFeed   string
		workspaces []string
		mcpConfig  string
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run Airlock: embedded NATS with JetStream, gate, executors and projector in one process",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch fsync {
			case "always":
				cfg.SyncAlways = true
			case "interval":
			default:
				return usageError("--fsync must be always or interval, not %q", fsync)
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return usageError("--log-level: %v", err)
			}
			cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			cfg.Logger.Debug("garbage collector", "gogc", tuneGC())
			if cfg.ReadyMaxLag < 1 {
				return usageError("--ready-max-lag must be at least 1")
			}
			if cfg.CheckpointEvery < 1 {
				return usageError("--checkpoint-every must be at least 1")
			}
			if cfg.CheckpointInterval < projector.MinCheckpointInterval {
				return usageError("--checkpoint-interval must be at least %s", projector.MinCheckpointInterval)
			}
			if cfg.ScrubSecureBacklog < -1 {
				return usageError("--secure-erase-backlog must be -1 or more")
			}
			if err := events.ValidTTL(resultTTL); err != nil {
				return usageError("--result-ttl: %v", err)
			}
			cfg.ResultTTL = resultTTL
			if resultTTL == 0 {
				cfg.ResultTTL = -1 // keep none
			}
			if cfg.ResultRetainBytes == 0 || cfg.ResultRetainBytes < -1 {
				return usageError("--result-retain-bytes must be positive, or -1 for no bound")
			}
			if cfg.ArchiveAfter < projector.MinArchiveAfter {
				return usageError("--archive-after %s is below %s", cfg.ArchiveAfter, projector.MinArchiveAfter)
			}
			cfg.Streams.PurgeOps = !keepOps
			if cfg.Streams.Duplicates < minDedupeWindow {
				return usageError("--dedupe-window %s is below %s: a request redelivered after a lost ack must still be recognised", cfg.Streams.Duplicates, minDedupeWindow)
			}
			if liveFeed != "" {
				m, err := livefeed.ParseMode(liveFeed)
				if err != nil {
					return usageError("--live-feed: %v", err)
				}
				if m == livefeed.Auto && cfg.NATSURL != "" {
					return usageError("--live-feed auto needs the embedded server: Airlock cannot see who subscribes on an external NATS, where the feed is always on")
				}
				cfg.LiveFeed = m
			}
			if cfg.NATSURL != "" {
				cfg.Listen, cfg.Monitor = "", ""
			}
			if len(workspaces) > 0 {
				if cfg.ExecutorGroup == "" {
					return usageError("--workspaces needs --executor-group: the processes that serve these workspaces share one group, and every process of a group serves the same workspaces")
				}
				for _, ws := range workspaces {
					if !events.ValidName(ws) {
						return usageError("--workspaces: %q is not a workspace name ([a-z0-9][a-z0-9_-]{0,63})", ws)
					}
				}
				cfg.ExecutorWorkspaces = workspaces
			}
			if cfg.ExecutorGroup != "" && !streams.ValidGroup(cfg.ExecutorGroup) {
				return usageError("--executor-group %q: %s", cfg.ExecutorGroup, streams.GroupRule)
			}
			if cfg.OwnerWait < time.Second {
				return usageError("--owner-wait must be at least 1s")
			}
			if cfg.StartTimeout <= 0 {
				return usageError("--start-timeout must be positive")
			}
			cfg.DataDir = g.data
			cfg.Auth = !noAuth
			if cfg.PolicyFile != "" && (len(wsModes) > 0 || len(cfg.Policy.Tools) > 0 || cmd.Flags().Changed("default-mode")) {
				return usageError("--policy excludes --workspace-mode, --default-mode and --tool-class: put them in the file")
			}
			if cfg.PolicyFile == "" {
				for ws, m := range wsModes {
					if cfg.Policy.Workspaces == nil {
						cfg.Policy.Workspaces = map[string]policy.WorkspaceSpec{}
					}
					cfg.Policy.Workspaces[ws] = policy.WorkspaceSpec{Mode: m}
				}
			} else {
				cfg.Policy = policy.Spec{}
			}
			if mcpConfig != "" {
				file, err := mcpgw.Load(mcpConfig)
				if err != nil {
					return &exitError{code: exitUsage, err: err}
				}
				cfg.Tools.MCP = file.UpstreamConfigs()
			}
			cfg.Executors = append(cfg.Executors, testExecutors()...)
			return serve(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:4222", "embedded NATS client address (host:port)")
	f.StringVar(&cfg.Monitor, "monitor", "127.0.0.1:8222", "embedded NATS HTTP monitoring address; empty for none")
	f.StringVar(&cfg.NATSURL, "nats-url", "", "use this external NATS instead of the embedded server")
	f.StringVar(&fsync, "fsync", "interval", "always: fsync before every ack (slow, survives power loss); interval: NATS default periodic fsync")
	f.DurationVar(&cfg.Streams.Duplicates, "dedupe-window", 2*time.Minute, "JetStream duplicate window of both streams (a request stays idempotent beyond it through its op)")
	f.StringVar(&cfg.ExecutorGroup, "executor-group", "", "durable consumer group of this process's executors (processes of one group share work); default airlock-exec")
	f.StringSliceVar(&workspaces, "workspaces", nil, "the only workspaces this process's executors serve, whose roots are on this host (needs --executor-group; every process of the group names the same); default every workspace")
	f.DurationVar(&cfg.StartTimeout, "start-timeout", app.DefaultStartTimeout, "how long a start waits for JetStream (a cluster electing its leaders, other processes provisioning at the same moment) before it gives up")
	f.DurationVar(&cfg.ClaimTimeout, "claim-timeout", 30*time.Second, "time without heartbeat after which a claimed op goes to recovery")
	f.DurationVar(&cfg.OwnerWait, "owner-wait", 10*time.Second, "how long a lost attempt that only the instance which made it can settle (its ledger is on that instance's disk) waits for that instance to come back, before another ends the op ambiguous")
	f.IntVar(&cfg.Streams.Replicas, "replicas", 1, "stream replicas (external cluster)")
	f.DurationVar(&cfg.ArchiveAfter, "archive-after", projector.DefaultArchiveAfter, "how long an ended op's events stay in AIRLOCK_OPS once folded, at least, before they leave it for AIRLOCK_ARCHIVE (see docs/operations.md)")
	f.Uint64Var(&cfg.Streams.ArchiveKeep, "archive-keep", streams.DefaultArchiveKeep, "for a new AIRLOCK_OPS: how many of its newest messages a purge of ended ops always leaves, so that a retry is told apart with no read per batch (ADR 0030); recorded in the stream, which keeps it; 0 for none")
	f.BoolVar(&keepOps, "keep-ops", false, "make a new AIRLOCK_OPS that keeps every op's events for good (it denies purges, which cannot be undone): no archive, and the server's memory grows with every op")
	f.StringVar(&cfg.PolicyFile, "policy", "", "policy file (YAML or JSON; see docs/policy.md); SIGHUP reloads it. Default: a built-in policy shaped by the three flags below")
	f.StringToStringVar(&wsModes, "workspace-mode", nil, "permission mode of a workspace, WS=auto|confirm|locked (repeatable; anything else is locked)")
	f.StringVar(&cfg.Policy.DefaultMode, "default-mode", "auto", "permission mode of workspaces not named by --workspace-mode")
	f.StringToStringVar(&cfg.Policy.Tools, "tool-class", nil, "capability class of a tool, TOOL=read|write|exec|network|destructive (repeatable; overrides the executor's own)")
	f.StringSliceVar(&cfg.Tools.ExecEnv, "exec-env", nil, "variables of this environment an exec child gets (default PATH only)")
	f.DurationVar(&cfg.Tools.ExecTimeout, "exec-timeout", 30*time.Second, "default timeout of an exec call (its args may set timeout_ms)")
	f.StringVar(&cfg.Tools.Bubblewrap, "bubblewrap", "", "path of bwrap: run every exec call inside bubblewrap (see docs/exec.md)")
	f.StringToStringVar(&cfg.Tools.Remote, "remote-tool", nil, "a remote tool and the NATS subject its tool server listens on, TOOL=SUBJECT (repeatable; see docs/remote.md)")
	f.StringVar(&mcpConfig, "mcp", "", "MCP configuration file (see docs/mcp.md): its upstreams' tools are served as <upstream>__<tool>, each call made once")
	f.DurationVar(&cfg.Tools.RemoteTimeout, "remote-timeout", 30*time.Second, "timeout of a remote tool call")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.IntVar(&cfg.CheckpointEvery, "checkpoint-every", 1024, "sign an audit checkpoint once this many events are unsigned")
	f.DurationVar(&cfg.CheckpointInterval, "checkpoint-interval", time.Second, "sign an audit checkpoint once the oldest unsigned event is this old")
	f.DurationVar(&resultTTL, "result-ttl", events.DefaultResultTTL, "how long a completed op's result is kept, sealed to the agent that asked, where the policy sets no results.ttl; 0 keeps none; at most 720h")
	f.BoolVar(&cfg.ResultEraseOnDelivery, "result-erase-after-delivery", false, "erase a kept result as soon as the agent has it, where the policy says nothing")
	f.Int64Var(&cfg.ResultRetainBytes, "result-retain-bytes", events.DefaultRetainedBytes, "the most result bytes (result_bytes, before sealing) one workspace keeps; over it the results of its oldest ops are erased first (-1: no bound)")
	f.IntVar(&cfg.ScrubSecureBacklog, "secure-erase-backlog", 16, "erase each finished op's request with a JetStream secure delete while no more than this many wait; above it, delete them (their bytes leave the disk with their block; see docs/security.md); -1: always secure")
	f.BoolVar(&cfg.AuditOverride, "unsafe-audit-override", false, "start even when the audit log fails verification (rolled back, forked, tampered): logged as an error; investigate first")
	f.StringVar(&cfg.UIListen, "ui", "", "serve the approver inbox on this address (host:port; e.g. 127.0.0.1:8080); empty for none; see docs/inbox.md")
	f.StringVar(&cfg.UIOrigin, "ui-origin", "", "the inbox's public origin, as browsers reach it (https://inbox.example.com behind a TLS proxy); default http://localhost:PORT")
	f.StringVar(&cfg.MetricsListen, "metrics", "", "serve Prometheus /metrics, /healthz and /readyz on this address (host:port; e.g. 127.0.0.1:9090); empty for none")
	f.Uint64Var(&cfg.ReadyMaxLag, "ready-max-lag", metrics.DefaultMaxLag, "/readyz says not ready while the projector is more than this many ops stream messages behind")
	f.StringVar(&liveFeed, "live-feed", "", "when AIRLOCK_OPS republishes on airlock.v1.live.> for watchers: auto, only while someone subscribes (the default on the embedded server), or on, always (the default and only choice with --nats-url)")
	f.BoolVar(&noAuth, "no-auth", false, "admit every client with every permission (no credentials): only for a private, single-user machine")
	return cmd
}

// liveDescription says when the live feed is on.
func liveDescription(m livefeed.Mode) string {
	if m == livefeed.Auto {
		return "republished while someone subscribes"
	}
	return "always republished"
}

func serve(ctx context.Context, cfg app.Config) error {
	a, err := app.Start(ctx, cfg)
	var auditErr *app.AuditError
	if errors.As(err, &auditErr) {
		return &exitError{code: exitAudit, err: err}
	}
	if errors.Is(err, audit.ErrUnreadable) {
		return &exitError{code: exitAudit, err: fmt.Errorf("CORRUPT: %w; restore the file named: audit.key and audit.pub from another data dir of the deployment or a backup, a projection/ file by rebuilding the projection (docs/operations.md, \"Rebuilding the projection\")", err)}
	}
	if err != nil {
		return err
	}
	fmt.Printf("airlock serving\n  nats:    %s\n", a.ClientURL())
	if a.Server != nil && cfg.Monitor != "" {
		fmt.Printf("  monitor: http://%s\n", a.Server.MonitorAddr())
	}
	if addr := a.MetricsAddr(); addr != "" {
		fmt.Printf("  metrics: http://%s/metrics (/healthz, /readyz)\n", addr)
	}
	if origin := a.UIOrigin(); origin != "" {
		fmt.Printf("  inbox:   %s (listening on %s; airlock approvers add NAME --ws WS makes an approver)\n", origin, a.UIAddr())
		if err := writeInboxOrigin(cfg.DataDir, origin); err != nil {
			cfg.Logger.Warn("inbox: origin not recorded for approvers add", "err", err)
		}
	}
	fmt.Printf("  data:    %s\n  streams: %s, %s\n  policy:  %s\n", cfg.DataDir, streams.Requests, streams.Ops, a.PolicyHash())
	fmt.Printf("  live:    %s (%s)\n", events.LiveSubjects, liveDescription(a.Live.Mode()))
	fmt.Printf("  audit:   %s (%s; %d events, %s)\n", a.AuditKey.Origin, filepath.Join(cfg.DataDir, audit.PubFile), a.AuditReport.Size, a.AuditReport.Status)
	logWarnings(cfg.Logger, a.Policy().Warnings())
	if a.Authority != nil {
		fmt.Printf("  creds:   %s\n", filepath.Dir(a.Authority.CredsPath(authority.ServiceName)))
	} else {
		fmt.Printf("  creds:   none (--no-auth: every client may do anything)\n")
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for running := true; running; {
		select {
		case <-ctx.Done():
			cfg.Logger.Info("shutting down")
			running = false
		case <-a.Done():
			cfg.Logger.Error("a part stopped", "err", a.Err())
			running = false
		case <-hup:
			if err := a.ReloadPolicy(ctx); err != nil {
				cfg.Logger.Error("policy not reloaded; the previous one stays in force", "err", err)
				continue
			}
			cfg.Logger.Info("policy reloaded", "hash", a.PolicyHash())
			logWarnings(cfg.Logger, a.Policy().Warnings())
		}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := a.Shutdown(sctx); err != nil {
		return err
	}
	fmt.Println("airlock stopped")
	return nil
}

// logWarnings logs what in the policy did not parse and so fails closed (a
// mode taken as locked, a class taken as destructive).
func logWarnings(l *slog.Logger, warnings []string) {
	for _, w := range warnings {
		l.Warn("policy: fails closed", "warning", w)
	}
}
