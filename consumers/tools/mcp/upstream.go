package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/ledger"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Upstream is one upstream MCP server and the session Airlock holds with
// it. It connects on first use and again after a session broke. It is
// safe for concurrent use.
type Upstream struct {
	cfg    UpstreamConfig
	client *sdk.Client

	// changes counts the upstream's tools/list_changed notifications.
	// Its handler takes no lock: the SDK's close of a session waits for
	// the handlers running, and sessions are closed under mu.
	changes atomic.Uint64

	mu        sync.Mutex
	session   *sdk.ClientSession
	defs      map[string]*sdk.Tool // the newest listing, by upstream tool name
	listed    time.Time            // when defs were listed
	listedGen uint64               // changes when the listing was asked for
	failed    error                // the last failure to connect, until RetryAfter
	failedAt  time.Time
}

// New returns an Upstream for cfg, not yet connected.
func New(cfg UpstreamConfig) (*Upstream, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.LedgerDir, 0o700); err != nil {
		return nil, fmt.Errorf("mcp upstream %s: ledger dir: %w", cfg.Name, err)
	}
	u := &Upstream{cfg: cfg}
	u.client = sdk.NewClient(&sdk.Implementation{Name: "airlock", Version: "v1"}, &sdk.ClientOptions{
		Capabilities:           &sdk.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { u.changed() },
	})
	return u, nil
}

// Close ends the session (and stops a launched program).
func (u *Upstream) Close() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.dropLocked()
}

// dropLocked ends the session under mu: a call that would connect again
// waits until a launched program has exited, so that a new one does not
// start beside it. The SDK's close waits for the notifications being
// handled; their handler (changed) takes no lock.
func (u *Upstream) dropLocked() error {
	if u.session == nil {
		return nil
	}
	err := u.session.Close()
	u.session = nil
	return err
}

// drop ends the session s if it is still the current one: the next call
// connects again.
func (u *Upstream) drop(s *sdk.ClientSession) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.session == s {
		_ = u.dropLocked()
	}
}

// transport is how Airlock reaches the upstream.
func (u *Upstream) transport() sdk.Transport {
	if u.cfg.URL != "" {
		return &sdk.StreamableClientTransport{
			Endpoint:   u.cfg.URL,
			HTTPClient: &http.Client{Transport: headers{h: u.cfg.Headers, base: http.DefaultTransport}},
			MaxRetries: -1,
		}
	}
	cmd := exec.Command(u.cfg.Command[0], u.cfg.Command[1:]...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for _, k := range slices.Sorted(maps.Keys(u.cfg.Env)) {
		cmd.Env = append(cmd.Env, k+"="+u.cfg.Env[k])
	}
	cmd.Stderr = logWriter{log: u.cfg.Logger, upstream: u.cfg.Name}
	cmd.Dir = u.cfg.Dir
	// The program dies with Airlock: a killed serve leaves no upstream
	// behind for the next start to run beside.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return &sdk.CommandTransport{Command: cmd}
}

// connect returns the session, connecting and listing the tools when
// there is none (fresh reports that). ctx bounds the connection, within
// ListTimeout. After a failure to connect, connect fails at once for
// RetryAfter: a dead or hung upstream costs one ListTimeout per
// RetryAfter, not one per call.
func (u *Upstream) connect(ctx context.Context) (s *sdk.ClientSession, fresh bool, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.session != nil {
		return u.session, false, nil
	}
	if u.failed != nil && time.Since(u.failedAt) < RetryAfter {
		return nil, false, u.failed
	}
	lctx, cancel := context.WithTimeout(ctx, u.cfg.ListTimeout)
	defer cancel()
	gen := u.changes.Load()
	s, err = u.client.Connect(lctx, u.transport(), nil)
	if err == nil {
		var defs map[string]*sdk.Tool
		if defs, err = list(lctx, s); err != nil {
			_ = s.Close()
			err = fmt.Errorf("list tools: %w", err)
		} else {
			u.session, u.defs, u.listed, u.listedGen = s, defs, time.Now(), gen
		}
	}
	if err != nil {
		u.failed, u.failedAt = fmt.Errorf("mcp upstream %s: connect: %w", u.cfg.Name, err), time.Now()
		return nil, false, u.failed
	}
	u.failed = nil
	return s, true, nil
}

// list reads every tool the session's server lists, at most MaxTools+1.
func list(ctx context.Context, s *sdk.ClientSession) (map[string]*sdk.Tool, error) {
	defs := map[string]*sdk.Tool{}
	for t, err := range s.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		if t == nil || t.Name == "" {
			continue
		}
		defs[t.Name] = t
		if len(defs) > MaxTools {
			break
		}
	}
	return defs, nil
}

// definition returns the definition of the upstream tool name as the
// upstream lists it now, or nil when it no longer lists it: a listing on
// a session that answers (a dead one is replaced, once). It fails when no
// live listing can be had: an old listing never stands for the tool's
// definition now.
func (u *Upstream) definition(ctx context.Context, name string) (*sdk.Tool, error) {
	var err error
	for range 2 {
		var s *sdk.ClientSession
		var fresh bool
		if s, fresh, err = u.connect(ctx); err != nil {
			return nil, err
		}
		if fresh {
			u.mu.Lock()
			def := u.defs[name]
			u.mu.Unlock()
			return def, nil
		}
		lctx, cancel := context.WithTimeout(ctx, u.cfg.ListTimeout)
		gen := u.changes.Load()
		var defs map[string]*sdk.Tool
		defs, err = list(lctx, s)
		cancel()
		if err == nil {
			u.mu.Lock()
			if u.session == s {
				u.defs, u.listed, u.listedGen = defs, time.Now(), gen
			}
			u.mu.Unlock()
			return defs[name], nil
		}
		err = fmt.Errorf("mcp upstream %s: list tools: %w", u.cfg.Name, err)
		u.drop(s) // dead or hung: the next try connects anew
	}
	return nil, err
}

// recent returns the definition of name from a listing younger than
// CacheFor that no tools/list_changed notification has made stale; ok is
// false when there is none.
func (u *Upstream) recent(name string) (def *sdk.Tool, ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.session == nil || u.changes.Load() != u.listedGen || time.Since(u.listed) > CacheFor {
		return nil, false
	}
	return u.defs[name], true
}

// changed marks the newest listing stale: the upstream said its tools
// changed. A notification during a listing makes that listing stale
// too, since it may predate the change.
func (u *Upstream) changed() { u.changes.Add(1) }

var unsafeChars = regexp.MustCompile(`[^a-z0-9_-]`)

// airlockName is the Airlock tool name of the upstream tool name, or ""
// when it has none (too long once joined).
func (u *Upstream) airlockName(name string) string {
	n := u.cfg.Name + Separator + unsafeChars.ReplaceAllString(strings.ToLower(name), "_")
	if !events.ValidName(n) {
		return ""
	}
	return n
}

// Executors connects, lists the upstream's tools and returns an executor
// for each, sorted by name. A tool whose Airlock name would be invalid
// or taken by another of the upstream's tools is left out, with a
// warning.
func (u *Upstream) Executors(ctx context.Context) ([]executor.Executor, error) {
	if _, _, err := u.connect(ctx); err != nil {
		return nil, err
	}
	u.mu.Lock()
	names := slices.Sorted(maps.Keys(u.defs))
	defs := u.defs
	u.mu.Unlock()
	if len(names) > MaxTools {
		u.cfg.Logger.Warn("mcp upstream: lists too many tools; the rest are left out", "upstream", u.cfg.Name, "max", MaxTools)
		names = names[:MaxTools]
	}
	var out []executor.Executor
	taken := map[string]string{}
	for _, name := range names {
		an := u.airlockName(name)
		if an == "" {
			u.cfg.Logger.Warn("mcp upstream: tool left out: its Airlock name would be over 64 characters", "upstream", u.cfg.Name, "tool", name)
			continue
		}
		if other, ok := taken[an]; ok {
			u.cfg.Logger.Warn("mcp upstream: tool left out: its Airlock name is another tool's", "upstream", u.cfg.Name, "tool", name, "other", other, "name", an)
			continue
		}
		taken[an] = name
		def := defs[name]
		t := &Tool{u: u, name: an, remote: name, class: classify(u.cfg.classOf(name), def.Annotations),
			ledger: ledger.Ledger{Dir: u.cfg.LedgerDir + "/" + an, Name: "mcp " + an, NoSync: u.cfg.LedgerNoSync}}
		if err := os.MkdirAll(t.ledger.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("mcp upstream %s: ledger dir: %w", u.cfg.Name, err)
		}
		t.desc = describe(u.cfg.Name, def)
		out = append(out, t)
	}
	return out, nil
}

// rank orders the classes, least dangerous first.
func rank(c events.Class) int {
	return slices.Index([]events.Class{events.ClassRead, events.ClassWrite, events.ClassExec, events.ClassNetwork, events.ClassDestructive}, c)
}

func raise(c, to events.Class) events.Class {
	if rank(to) > rank(c) {
		return to
	}
	return c
}

// classify raises the configured class by what the tool's annotations
// admit to; it never lowers it.
func classify(c events.Class, a *sdk.ToolAnnotations) events.Class {
	if a == nil {
		return c
	}
	if !a.ReadOnlyHint {
		c = raise(c, events.ClassWrite)
	}
	if a.OpenWorldHint != nil && *a.OpenWorldHint && rank(c) < rank(events.ClassNetwork) {
		c = events.ClassNetwork
	}
	if a.DestructiveHint != nil && *a.DestructiveHint {
		c = events.ClassDestructive
	}
	return c
}

// describe is the executor's description of an upstream tool.
func describe(upstream string, def *sdk.Tool) executor.Description {
	text := strings.TrimSpace(def.Description)
	if text == "" {
		text = "(the upstream gives no description)"
	}
	schema, err := json.Marshal(def.InputSchema)
	if err != nil || def.InputSchema == nil || !json.Valid(schema) {
		schema = events.AnyObjectSchema
	}
	return executor.Description{
		Text: fmt.Sprintf("%s\n\n(Tool %q of MCP server %q, called through Airlock: the call may be held until a person approves it, and runs at most once.)",
			text, def.Name, upstream),
		InputSchema: schema,
		Upstream:    upstream,
	}
}

// definitionDigest is the digest of what an agent and an approver rely on
// in a tool's definition: its name, title, description and input schema.
func definitionDigest(def *sdk.Tool) string {
	if def == nil {
		return "absent"
	}
	schema, _ := json.Marshal(def.InputSchema)
	b, _ := json.Marshal(struct {
		Name        string          `json:"name"`
		Title       string          `json:"title,omitempty"`
		Description string          `json:"description,omitempty"`
		InputSchema json.RawMessage `json:"input_schema"`
	}{def.Name, def.Title, def.Description, schema})
	if c, err := events.Canonical(b); err == nil {
		b = c
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// headers adds fixed headers to every request.
type headers struct {
	h    map[string]string
	base http.RoundTripper
}

func (t headers) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.h) > 0 {
		r = r.Clone(r.Context())
		for k, v := range t.h {
			r.Header.Set(k, v)
		}
	}
	return t.base.RoundTrip(r)
}
