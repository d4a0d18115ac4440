package mcpgw

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/consumers/tools/mcp"
	"github.com/airlock-dev/airlock/events"
	"go.yaml.in/yaml/v3"
)

// Limits of the configuration file.
const (
	// MaxConfigBytes bounds the file.
	MaxConfigBytes = 1 << 20
	// MaxUpstreams bounds the upstream servers of one file.
	MaxUpstreams = 64
	// MaxTokens bounds the bearer tokens of the HTTP transport.
	MaxTokens = 1024
	// DefaultHoldWait is how long a call waits for its op (through a
	// hold) before it returns what it knows.
	DefaultHoldWait = 25 * time.Second
	// MaxHoldWait bounds HoldWait.
	MaxHoldWait = 10 * time.Minute
)

// File is the configuration of `airlock mcp` and of the upstream servers
// `airlock serve --mcp FILE` puts behind Airlock (docs/mcp.md).
type File struct {
	// Upstreams are the MCP servers whose tools Airlock serves.
	Upstreams []UpstreamSpec `yaml:"upstreams"`
	// Gateway configures `airlock mcp`.
	Gateway GatewaySpec `yaml:"gateway"`

	dir string // the file's directory: relative paths start there
}

// UpstreamSpec is one upstream server as the file says it.
type UpstreamSpec struct {
	Name        string            `yaml:"name"`
	Command     []string          `yaml:"command"`
	Env         map[string]string `yaml:"env"`
	URL         string            `yaml:"url"`
	Headers     map[string]string `yaml:"headers"`
	Timeout     time.Duration     `yaml:"timeout"`
	ListTimeout time.Duration     `yaml:"list_timeout"`
	Tools       []RuleSpec        `yaml:"tools"`
}

// RuleSpec classifies the upstream tools matching Match.
type RuleSpec struct {
	Match string `yaml:"match"`
	Class string `yaml:"class"`
}

// GatewaySpec configures the gateway.
type GatewaySpec struct {
	// Workspace is the workspace of the calls of a stdio session (the
	// --ws flag overrides it).
	Workspace string `yaml:"workspace"`
	// HoldWait is how long a call waits for its op; default 25s.
	HoldWait time.Duration `yaml:"hold_wait"`
	// Tokens map the HTTP transport's bearer tokens to agents.
	Tokens []TokenSpec `yaml:"tokens"`
}

// TokenSpec maps one bearer token to one agent credential and workspace.
// The file holds the token's SHA-256, never the token.
type TokenSpec struct {
	// SHA256 is the hex SHA-256 of the token (`airlock mcp token`
	// prints a new token and its line).
	SHA256 string `yaml:"sha256"`
	// Creds is the agent's credential file (relative to the file).
	Creds string `yaml:"creds"`
	// Workspace is the workspace of the session's calls.
	Workspace string `yaml:"workspace"`
}

// Load reads and checks the file at path.
func Load(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("mcp config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("mcp config: %w", err)
	}
	cf, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("mcp config %s: %w", path, err)
	}
	abs, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("mcp config: %w", err)
	}
	cf.dir = abs
	return cf, nil
}

// Parse decodes a configuration strictly (no unknown field, one
// document) and checks it.
func Parse(data []byte) (*File, error) {
	if len(data) > MaxConfigBytes {
		return nil, fmt.Errorf("file is over the %d-byte limit", MaxConfigBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var cf File
	if err := dec.Decode(&cf); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty document")
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one document: the file holds one")
	}
	if err := cf.Validate(); err != nil {
		return nil, err
	}
	return &cf, nil
}

// Validate checks every field and changes nothing.
func (f *File) Validate() error {
	var errs []error
	if len(f.Upstreams) > MaxUpstreams {
		errs = append(errs, fmt.Errorf("%d upstreams, at most %d", len(f.Upstreams), MaxUpstreams))
	}
	seen := map[string]bool{}
	for i, u := range f.Upstreams {
		c := f.upstream(u, "")
		c.LedgerDir = "-" // filled in by serve
		c.EnsureDefaults()
		if err := c.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("upstreams[%d]: %w", i, err))
		}
		if seen[u.Name] {
			errs = append(errs, fmt.Errorf("upstreams[%d]: name %q is taken by another upstream", i, u.Name))
		}
		seen[u.Name] = true
	}
	g := f.Gateway
	if g.Workspace != "" && !events.ValidName(g.Workspace) {
		errs = append(errs, fmt.Errorf("gateway.workspace %q is not a workspace name ([a-z0-9][a-z0-9_-]{0,63})", g.Workspace))
	}
	if g.HoldWait < 0 || g.HoldWait > MaxHoldWait {
		errs = append(errs, fmt.Errorf("gateway.hold_wait %s is outside 0..%s", g.HoldWait, MaxHoldWait))
	}
	if len(g.Tokens) > MaxTokens {
		errs = append(errs, fmt.Errorf("gateway.tokens: %d, at most %d", len(g.Tokens), MaxTokens))
	}
	hashes := map[string]bool{}
	for i, t := range g.Tokens {
		if b, err := hex.DecodeString(t.SHA256); err != nil || len(b) != 32 {
			errs = append(errs, fmt.Errorf("gateway.tokens[%d]: sha256 must be 64 hex digits (the SHA-256 of the token; airlock mcp token makes one)", i))
		}
		if h := strings.ToLower(t.SHA256); hashes[h] {
			errs = append(errs, fmt.Errorf("gateway.tokens[%d]: the same token twice: one token is one agent", i))
		} else {
			hashes[h] = true
		}
		if t.Creds == "" {
			errs = append(errs, fmt.Errorf("gateway.tokens[%d]: no creds: name the agent's credential file", i))
		}
		if !events.ValidName(t.Workspace) {
			errs = append(errs, fmt.Errorf("gateway.tokens[%d]: workspace %q is not a workspace name", i, t.Workspace))
		}
	}
	return errors.Join(errs...)
}

// upstream is the executor's configuration of u; ledgerDir is where its
// ledger goes.
func (f *File) upstream(u UpstreamSpec, ledgerDir string) mcp.UpstreamConfig {
	c := mcp.UpstreamConfig{
		Name: u.Name, Command: u.Command, Env: u.Env, URL: u.URL, Headers: u.Headers,
		Timeout: u.Timeout, ListTimeout: u.ListTimeout, LedgerDir: ledgerDir,
	}
	for _, r := range u.Tools {
		c.Rules = append(c.Rules, mcp.Rule{Match: r.Match, Class: events.Class(r.Class)})
	}
	return c
}

// UpstreamConfigs are the executors' configurations of the upstreams
// (serve fills in each ledger dir).
func (f *File) UpstreamConfigs() []mcp.UpstreamConfig {
	var out []mcp.UpstreamConfig
	for _, u := range f.Upstreams {
		c := f.upstream(u, "")
		if len(c.Command) > 0 && strings.ContainsRune(c.Command[0], '/') {
			// A program named by a relative path is found beside the file.
			c.Command = append([]string{f.Path(c.Command[0])}, c.Command[1:]...)
		}
		out = append(out, c)
	}
	return out
}

// Path resolves p against the file's directory.
func (f *File) Path(p string) string {
	if p == "" || filepath.IsAbs(p) || f.dir == "" {
		return p
	}
	return filepath.Join(f.dir, p)
}
