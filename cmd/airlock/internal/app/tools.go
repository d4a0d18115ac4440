package app

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/consumers/tools/command"
	"github.com/airlock-dev/airlock/consumers/tools/mcp"
	"github.com/airlock-dev/airlock/consumers/tools/patch"
	"github.com/airlock-dev/airlock/consumers/tools/remote"
	"github.com/airlock-dev/airlock/events"
	"github.com/prometheus/client_golang/prometheus"
)

// ToolsConfig configures the built-in tools. The zero value registers
// echo, exec and apply_patch with their defaults and no remote tool.
type ToolsConfig struct {
	// ExecEnv names the variables of Airlock's environment an exec child
	// gets; nil for the default (PATH).
	ExecEnv []string
	// ExecTimeout is an exec call's default timeout; zero for 30s.
	ExecTimeout time.Duration
	// Bubblewrap is the bwrap binary exec runs every call in; empty for
	// none.
	Bubblewrap string
	// Remote maps a remote tool's name to the NATS subject its tool server
	// listens on (see docs/remote.md).
	Remote map[string]string
	// RemoteTimeout is a remote call's timeout; zero for 30s.
	RemoteTimeout time.Duration
	// MCP are the upstream MCP servers whose tools Airlock serves, each
	// tool as <upstream>__<tool> (docs/mcp.md). Their ledgers go to
	// DataDir/ledger/mcp/<upstream>; LedgerDir is filled in. An upstream
	// that cannot be reached at start is logged and left out.
	MCP []mcp.UpstreamConfig
}

// builtinTools builds echo, exec, apply_patch and the remote tools. Exec
// and apply_patch keep their ledgers in DataDir/ledger and work under the
// workspace root the policy in force names.
func (a *App) builtinTools(ctx context.Context, cfg Config) ([]executor.Executor, error) {
	root := func(ws string) string {
		if a.gate == nil {
			return ""
		}
		return a.gate.Policy().Root(ws)
	}
	ex, err := command.New(command.Config{
		Root: root, LedgerDir: filepath.Join(cfg.DataDir, "ledger", "exec"), LedgerNoSync: ledgerNoSync(cfg),
		EnvAllow: cfg.Tools.ExecEnv, DefaultTimeout: cfg.Tools.ExecTimeout,
		Bubblewrap: cfg.Tools.Bubblewrap, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	pt, err := patch.New(patch.Config{Root: root, LedgerDir: filepath.Join(cfg.DataDir, "ledger", "patch"), Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	tools := []executor.Executor{executor.Echo{}, ex, pt}
	for name, subject := range cfg.Tools.Remote {
		r, err := remote.New(remote.Config{Conn: a.Conn, Tool: name, Subject: subject, Timeout: cfg.Tools.RemoteTimeout, Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("app: remote tool %s: %w", name, err)
		}
		tools = append(tools, r)
	}
	for _, uc := range cfg.Tools.MCP {
		uc.LedgerDir = filepath.Join(cfg.DataDir, "ledger", "mcp", uc.Name)
		uc.LedgerNoSync = ledgerNoSync(cfg)
		if len(uc.Command) > 0 && uc.Dir == "" {
			// An empty working directory of its own, outside the data dir.
			dir, err := os.MkdirTemp("", "airlock-mcp-"+uc.Name+"-")
			if err != nil {
				return nil, fmt.Errorf("app: mcp upstream %s: %w", uc.Name, err)
			}
			a.tempDirs = append(a.tempDirs, dir)
			uc.Dir = dir
		}
		if uc.Logger == nil {
			uc.Logger = cfg.Logger
		}
		uc.Observe = a.upstreamCalls().observe
		u, err := mcp.New(uc)
		if err != nil {
			return nil, fmt.Errorf("app: %w", err)
		}
		execs, err := u.Executors(ctx)
		if err != nil {
			cfg.Logger.Error("mcp upstream left out: its tools are not served until the next start", "upstream", uc.Name, "err", err)
			_ = u.Close()
			continue
		}
		a.upstreams = append(a.upstreams, u)
		if a.mcpClasses == nil {
			a.mcpClasses = map[string]string{}
		}
		for _, ex := range execs {
			a.mcpClasses[ex.Tool()] = string(ex.Class())
		}
		tools = append(tools, execs...)
	}
	return tools, nil
}

// operandsOf hashes a request's operands with its tool's executor, for the
// gate; tools that touch no files have none.
func operandsOf(reg *executor.Registry) func(context.Context, *events.Request) (map[string]string, error) {
	return func(ctx context.Context, req *events.Request) (map[string]string, error) {
		ex, ok := reg.Lookup(req.Tool)
		if !ok {
			return nil, nil
		}
		if d, ok := ex.(interface {
			DecisionOperands(context.Context, string, json.RawMessage) (map[string]string, error)
		}); ok {
			// An MCP upstream's tool: a recent listing, so that a slow
			// upstream does not hold up the gate (the runner checks
			// again before the call).
			return d.DecisionOperands(ctx, req.Workspace, req.Args)
		}
		ob, ok := ex.(executor.Operands)
		if !ok {
			return nil, nil
		}
		return ob.Operands(ctx, req.Workspace, req.Args)
	}
}

// upstreamCalls is the histogram of the calls sent to MCP upstreams,
// registered with the process's metrics once they exist.
func (a *App) upstreamCalls() *upstreamCalls {
	if a.mcpCalls == nil {
		a.mcpCalls = &upstreamCalls{h: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "airlock_mcp_upstream_call_duration_seconds",
			Help:    "Calls sent to upstream MCP servers, by Airlock tool and outcome (answered, tool_error, refused, ambiguous, interrupted): from sending to the answer.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"tool", "outcome"})}
	}
	return a.mcpCalls
}

type upstreamCalls struct{ h *prometheus.HistogramVec }

func (u *upstreamCalls) observe(tool, outcome string, took time.Duration) {
	u.h.WithLabelValues(tool, outcome).Observe(took.Seconds())
}

// ledgerNoSync says whether the executors' ledgers may skip fsync.
// Beside an embedded server that fsyncs on an interval, a power loss
// takes the op's events too: the ledger need not be more durable than
// they are. Beside --fsync always or an external (replicated) NATS, it
// must survive what they survive.
func ledgerNoSync(cfg Config) bool { return cfg.NATSURL == "" && !cfg.SyncAlways }
