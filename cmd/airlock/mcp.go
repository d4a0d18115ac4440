package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/mcpgw"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/periodic"
	"github.com/airlock-dev/airlock/producers"
	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// Limits of `airlock mcp`.
const (
	// mcpStartTimeout bounds the wait for Airlock's tool catalog at start.
	mcpStartTimeout = 30 * time.Second
	// mcpRefreshEvery is how often the gateway reads the catalog again.
	mcpRefreshEvery = 30 * time.Second
	// mcpSessionTimeout ends an HTTP session idle this long.
	mcpSessionTimeout = 30 * time.Minute
	// mcpMaxBodyBytes bounds an HTTP request body (a JSON-RPC message):
	// the largest request Airlock takes, and room for the envelope.
	mcpMaxBodyBytes = events.MaxRequestBytes + 64<<10
)

func newMCP(g *globals) *cobra.Command {
	var (
		ws, configPath, httpAddr, metricsAddr, logLevel string
		holdWait                                        time.Duration
	)
	cmd := &cobra.Command{
		Use:   "mcp [--ws W] [--config FILE] [--http ADDR]",
		Short: "Serve Airlock's tools to MCP clients (stdio, or streamable HTTP)",
		Long: `Serve Airlock's tools to MCP clients: each tool call is an op under the policy.

Over stdio (the default: what an MCP client's configuration launches) the
session acts as the agent of --creds (or <data>/creds/agent.creds) in
workspace --ws. With --http ADDR it serves streamable HTTP at
http://ADDR/mcp; each bearer token in the config file's gateway.tokens is
one agent credential and workspace, and a request without a known token
gets 401.

A held call waits up to --hold-wait for its approval, with progress
notifications; then it returns APPROVAL_REQUIRED with the hold id. The same
call again returns the same hold while it is pending, and the result once
it has run. See docs/mcp.md.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: parseLevel(logLevel)}))
			file := &mcpgw.File{}
			if configPath != "" {
				var err error
				if file, err = mcpgw.Load(configPath); err != nil {
					return &exitError{code: exitUsage, err: err}
				}
			}
			if !cmd.Flags().Changed("hold-wait") && file.Gateway.HoldWait != 0 {
				holdWait = file.Gateway.HoldWait
			}
			if holdWait <= 0 || holdWait > mcpgw.MaxHoldWait {
				return usageError("--hold-wait must be in (0, %s]", mcpgw.MaxHoldWait)
			}
			var metrics *mcpgw.Metrics
			if metricsAddr != "" {
				metrics = mcpgw.NewMetrics()
				ln, err := net.Listen("tcp", metricsAddr)
				if err != nil {
					return fmt.Errorf("mcp: metrics: %w", err)
				}
				srv := &http.Server{Handler: metrics.Handler(), ReadHeaderTimeout: 5 * time.Second}
				go func() { _ = srv.Serve(ln) }()
				defer srv.Close()
				log.Info("mcp: metrics", "addr", "http://"+ln.Addr().String()+"/metrics")
			}
			cfg := mcpgw.Config{HoldWait: holdWait, Metrics: metrics, Logger: log}
			if httpAddr != "" {
				if len(file.Gateway.Tokens) == 0 {
					return usageError("--http needs bearer tokens: list them under gateway.tokens in --config FILE (airlock mcp token makes one)")
				}
				return serveMCPHTTP(cmd.Context(), g, file, cfg, httpAddr)
			}
			if ws == "" {
				ws = file.Gateway.Workspace
			}
			if !events.ValidName(ws) {
				return usageError("give the workspace of the session's calls: --ws W (or gateway.workspace in --config), a name of [a-z0-9][a-z0-9_-]{0,63}")
			}
			return serveMCPStdio(cmd.Context(), g, ws, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&ws, "ws", "", "workspace of the session's calls (stdio)")
	f.StringVar(&configPath, "config", "", "configuration file (YAML; see docs/mcp.md): gateway settings, HTTP tokens")
	f.StringVar(&httpAddr, "http", "", "serve streamable HTTP on this address (host:port) at /mcp instead of stdio")
	f.DurationVar(&holdWait, "hold-wait", mcpgw.DefaultHoldWait, "how long a call waits for its op, through a hold, before it returns APPROVAL_REQUIRED or PENDING")
	f.StringVar(&metricsAddr, "metrics", "", "serve Prometheus /metrics on this address; empty for none")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error (logs go to stderr)")
	cmd.AddCommand(newMCPCheck(), newMCPToken())
	return cmd
}

func parseLevel(s string) slog.Level {
	var l slog.Level
	if l.UnmarshalText([]byte(s)) != nil {
		return slog.LevelInfo
	}
	return l
}

func newMCPCheck() *cobra.Command {
	return &cobra.Command{
		Use:   "check FILE",
		Short: "Check an MCP configuration file: upstream servers, tool classes, gateway tokens",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := mcpgw.Load(args[0])
			if err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			for _, u := range f.UpstreamConfigs() {
				where := u.URL
				if where == "" {
					where = fmt.Sprintf("%q", u.Command)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "upstream %s: %s, %d tool rules (a tool no rule matches is destructive)\n", u.Name, where, len(u.Rules))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "gateway: %d tokens\n%s: ok\n", len(f.Gateway.Tokens), args[0])
			return nil
		},
	}
}

func newMCPToken() *cobra.Command {
	var creds, ws string
	cmd := &cobra.Command{
		Use:   "token --creds FILE --ws W",
		Short: "Make a bearer token for airlock mcp --http, and its line for gateway.tokens",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !events.ValidName(ws) {
				return usageError("--ws must be a workspace name")
			}
			b := make([]byte, 32)
			if _, err := rand.Read(b); err != nil {
				return err
			}
			tok := "alk_" + hex.EncodeToString(b)
			sum := sha256.Sum256([]byte(tok))
			fmt.Fprintf(cmd.OutOrStdout(), "token (give it to the agent's MCP client, as Authorization: Bearer ...; it is shown once):\n  %s\nline for gateway.tokens:\n  - {sha256: %s, creds: %s, workspace: %s}\n",
				tok, hex.EncodeToString(sum[:]), creds, ws)
			return nil
		},
	}
	cmd.Flags().StringVar(&creds, "creds", "", "the agent's credential file the token stands for")
	cmd.Flags().StringVar(&ws, "ws", "", "the workspace of the token's calls")
	_ = cmd.MarkFlagRequired("creds")
	_ = cmd.MarkFlagRequired("ws")
	return cmd
}

// catalog reads Airlock's tool catalog, trying again while Airlock does
// not answer, for at most mcpStartTimeout.
func catalog(ctx context.Context, c *producers.Client) (*events.ToolCatalog, error) {
	ctx, cancel := context.WithTimeout(ctx, mcpStartTimeout)
	defer cancel()
	for {
		cat, err := c.Tools(ctx)
		if err == nil {
			return cat, nil
		}
		if !errors.Is(err, events.ErrUnavailable) || ctx.Err() != nil {
			return nil, fmt.Errorf("mcp: read Airlock's tools: %w; is airlock serve running, and --server pointing at it?", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("mcp: read Airlock's tools: no answer within %s: %w; is airlock serve running, and --server pointing at it?", mcpStartTimeout, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// refresh reads the catalog every mcpRefreshEvery and updates gw.
func refresh(ctx context.Context, c *producers.Client, gw *mcpgw.Gateway, log *slog.Logger) {
	periodic.Every(ctx, mcpRefreshEvery, func() {
		cat, err := c.Tools(ctx)
		if err != nil {
			log.Warn("mcp: reading Airlock's tools", "err", err)
			return
		}
		gw.Update(cat)
	})
}

// mcpClientOptions are the options of a gateway's client.
func mcpClientOptions(holdWait time.Duration) []producers.Option {
	return []producers.Option{producers.WithWait(holdWait), producers.WithWaitThroughHolds(), producers.WithSource("airlock/mcp")}
}

func serveMCPStdio(ctx context.Context, g *globals, ws string, cfg mcpgw.Config) error {
	c, done, err := g.agentClient(mcpClientOptions(cfg.HoldWait)...)
	if err != nil {
		return err
	}
	defer done()
	cat, err := catalog(ctx, c)
	if err != nil {
		return err
	}
	gw, err := mcpgw.New(cfg, cat)
	if err != nil {
		return err
	}
	name, err := agentName(g.credsFor("agent"))
	if err != nil {
		return err
	}
	agent := &mcpgw.Agent{Name: name, Workspace: ws, Client: c}
	cfg.Logger.Info("mcp: serving on stdio", "agent", agent.Name, "ws", ws, "tools", len(cat.Tools))
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go refresh(rctx, c, gw, cfg.Logger)
	err = gw.Server(agent).Run(rctx, mcpgw.Stdio(os.Stdin, os.Stdout, cfg.Logger))
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// tokenAgent is one bearer token's agent.
type tokenAgent struct {
	sum    [32]byte
	agent  *mcpgw.Agent
	server *sdk.Server
}

func serveMCPHTTP(ctx context.Context, g *globals, file *mcpgw.File, cfg mcpgw.Config, addr string) error {
	var agents []*tokenAgent
	var gw *mcpgw.Gateway
	var first *producers.Client
	for i, t := range file.Gateway.Tokens {
		path := file.Path(t.Creds)
		name, err := agentName(path)
		if err != nil {
			return &exitError{code: exitUsage, err: fmt.Errorf("mcp: gateway.tokens[%d]: %w", i, err)}
		}
		c, done, err := connectAgent(g, path, cfg.HoldWait)
		if err != nil {
			return fmt.Errorf("mcp: gateway.tokens[%d]: %w", i, err)
		}
		defer done()
		if gw == nil {
			cat, err := catalog(ctx, c)
			if err != nil {
				return err
			}
			if gw, err = mcpgw.New(cfg, cat); err != nil {
				return err
			}
			first = c
		}
		ta := &tokenAgent{agent: &mcpgw.Agent{Name: name, Workspace: t.Workspace, Client: c}}
		b, _ := hex.DecodeString(t.SHA256)
		copy(ta.sum[:], b)
		ta.server = gw.Server(ta.agent)
		agents = append(agents, ta)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go refresh(rctx, first, gw, cfg.Logger)

	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		sum := sha256.Sum256([]byte(token))
		for i, a := range agents {
			if subtle.ConstantTimeCompare(sum[:], a.sum[:]) == 1 {
				return &auth.TokenInfo{UserID: hex.EncodeToString(a.sum[:8]), Expiration: time.Now().Add(time.Hour), Extra: map[string]any{"agent": i}}, nil
			}
		}
		return nil, auth.ErrInvalidToken
	}
	h := sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server {
		ti := auth.TokenInfoFromContext(r.Context())
		if ti == nil {
			return nil
		}
		i, ok := ti.Extra["agent"].(int)
		if !ok || i < 0 || i >= len(agents) {
			return nil
		}
		return agents[i].server
	}, &sdk.StreamableHTTPOptions{Logger: cfg.Logger, MaxRequestBodyBytes: mcpMaxBodyBytes, SessionTimeout: mcpSessionTimeout})
	mux := http.NewServeMux()
	mux.Handle("/mcp", auth.RequireBearerToken(verify, nil)(h))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("mcp: listen: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	if host, _, _ := net.SplitHostPort(ln.Addr().String()); !net.ParseIP(host).IsLoopback() {
		cfg.Logger.Warn("mcp: serving plain HTTP beyond loopback: bearer tokens cross the network in the clear; put TLS in front (a reverse proxy)", "addr", ln.Addr().String())
	}
	cfg.Logger.Info("mcp: serving streamable HTTP", "url", "http://"+ln.Addr().String()+"/mcp", "tokens", len(agents))
	fmt.Fprintf(os.Stderr, "airlock mcp serving http://%s/mcp\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
	return nil
}

// agentName is the agent a credential file belongs to: as the
// principals.json beside it lists it, else the file's name (a credential
// kept apart from its data dir, `creds add --out`). A credential of
// another role is refused: a session acts as an agent.
func agentName(path string) (string, error) {
	if p, ok := authority.Identify(path); ok {
		if p.Role != authority.RoleAgent {
			return "", fmt.Errorf("%s is the credential of %s, a%s %s: an MCP session acts as an agent; use an agent's credential", path, p.Name, article(string(p.Role)), p.Role)
		}
		return p.Name, nil
	}
	return principal(path, "agent"), nil
}

// connectAgent connects as the agent of the credential at path, with its
// key for its kept results.
func connectAgent(g *globals, path string, holdWait time.Duration) (*producers.Client, func(), error) {
	opt, err := authority.ConnectOption(path)
	if err != nil {
		return nil, nil, err
	}
	nc, err := nats.Connect(g.server, opt, nats.Name("airlock-mcp"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, nil, fmt.Errorf("connect %s: %w", g.server, err)
	}
	seed, err := authority.Seed(path)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	defer clear(seed)
	c, err := producers.New(nc, append(mcpClientOptions(holdWait), producers.WithAgentKey(seed))...)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return c, func() { _ = c.Close(); nc.Close() }, nil
}
