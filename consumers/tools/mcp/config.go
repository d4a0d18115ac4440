package mcp

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path"
	"regexp"
	"time"

	"github.com/airlock-dev/airlock/events"
)

// Limits and defaults of an upstream's configuration.
const (
	// DefaultTimeout is how long a call may take when Timeout is unset.
	DefaultTimeout = 60 * time.Second
	// MaxTimeout bounds Timeout.
	MaxTimeout = 10 * time.Minute
	// DefaultListTimeout bounds connecting to an upstream and listing its
	// tools when ListTimeout is unset.
	DefaultListTimeout = 5 * time.Second
	// MaxTools bounds the tools Airlock takes from one upstream; the
	// rest are left out, with a warning.
	MaxTools = 256
	// MaxRules bounds an upstream's classification rules.
	MaxRules = 256
	// Separator joins an upstream's name and its tool's in the Airlock
	// tool name.
	Separator = "__"
	// RetryAfter is how long an upstream that could not be connected is
	// not tried again: calls fail at once (REMOTE_UNAVAILABLE).
	RetryAfter = 5 * time.Second
	// CacheFor is how long the gate decides with a listing of the
	// upstream's tools (unless the upstream said its tools changed); the
	// runner always lists them again before the call.
	CacheFor = 30 * time.Second
)

var upstreamName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// Rule classifies the upstream tools whose name matches Match, a
// path.Match pattern ("read_*", "*"); the first matching rule wins.
type Rule struct {
	Match string
	Class events.Class
}

// UpstreamConfig is one upstream MCP server: a program Airlock launches
// and talks to over stdio, or a streamable HTTP endpoint.
type UpstreamConfig struct {
	// Name names the upstream: [a-z0-9][a-z0-9-]{0,31}, and the first
	// part of its tools' Airlock names.
	Name string
	// Command is the program and its args (stdio). Exactly one of
	// Command and URL.
	Command []string
	// Env is the environment of Command besides PATH and HOME, which it
	// gets from Airlock's.
	Env map[string]string
	// Dir is the working directory of Command; serve makes an empty one
	// per upstream. The program runs as Airlock's user (docs/mcp.md).
	Dir string
	// URL is the streamable HTTP endpoint (http or https).
	URL string
	// Headers are sent with every HTTP request (Authorization, ...).
	Headers map[string]string
	// Timeout bounds one call; default DefaultTimeout, at most
	// MaxTimeout. A call without an answer by then is ambiguous.
	Timeout time.Duration
	// ListTimeout bounds connecting and listing the tools; default
	// DefaultListTimeout, at most a minute.
	ListTimeout time.Duration
	// Rules classify the upstream's tools; a tool none matches is
	// destructive.
	Rules []Rule
	// LedgerDir holds the ledger of the upstream's calls, one directory
	// per tool. Required.
	LedgerDir string
	// LedgerNoSync writes the ledger without fsync (ledger.Ledger.NoSync):
	// for an embedded server that fsyncs on an interval, whose op events
	// a power loss takes too.
	LedgerNoSync bool
	// Observe, when set, is told of every call sent to the upstream: the
	// Airlock tool, how it ended (answered, tool_error, refused,
	// ambiguous, interrupted) and how long it took.
	Observe func(tool, outcome string, took time.Duration)
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// EnsureDefaults fills in the defaults of what is unset.
func (c *UpstreamConfig) EnsureDefaults() {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.ListTimeout == 0 {
		c.ListTimeout = DefaultListTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks c and changes nothing.
func (c *UpstreamConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !upstreamName.MatchString(c.Name) {
		bad("name %q must match %s", c.Name, upstreamName)
	}
	switch {
	case len(c.Command) > 0 && c.URL != "":
		bad("give command or url, not both")
	case len(c.Command) == 0 && c.URL == "":
		bad("give command (a program to launch, talking over stdio) or url (a streamable HTTP endpoint)")
	case len(c.Command) > 0 && c.Command[0] == "":
		bad("command[0] is empty")
	case c.URL != "":
		u, err := url.Parse(c.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("url %q is not an http or https URL", c.URL)
		}
	}
	if (len(c.Env) > 0 || c.Dir != "") && c.URL != "" {
		bad("env and dir apply to command only")
	}
	if len(c.Headers) > 0 && len(c.Command) > 0 {
		bad("headers apply to url only")
	}
	if c.Timeout < 0 || c.Timeout > MaxTimeout {
		bad("timeout %s is outside 0..%s", c.Timeout, MaxTimeout)
	}
	if c.ListTimeout < 0 || c.ListTimeout > time.Minute {
		bad("list_timeout %s is outside 0..1m", c.ListTimeout)
	}
	if len(c.Rules) > MaxRules {
		bad("%d tool rules, at most %d", len(c.Rules), MaxRules)
	}
	for i, r := range c.Rules {
		if _, err := path.Match(r.Match, ""); err != nil || r.Match == "" {
			bad("tools[%d]: match %q is not a pattern (path.Match: *, ?, [...])", i, r.Match)
		}
		if events.ParseClass(string(r.Class)) != r.Class {
			bad("tools[%d]: class %q is not read, write, exec, network or destructive", i, r.Class)
		}
	}
	if c.LedgerDir == "" {
		bad("no ledger dir")
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("mcp upstream %s: %w", c.Name, err)
	}
	return nil
}

// classOf is the class the rules give the upstream tool named name.
func (c *UpstreamConfig) classOf(name string) events.Class {
	for _, r := range c.Rules {
		if ok, _ := path.Match(r.Match, name); ok {
			return r.Class
		}
	}
	return events.ClassDestructive
}
