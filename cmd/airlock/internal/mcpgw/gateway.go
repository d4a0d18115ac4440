package mcpgw

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/consumers/tools/mcp"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/producers"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// DefaultProgressEvery is how often a waiting call sends a progress
// notification (to a client that asked for them).
const DefaultProgressEvery = 5 * time.Second

// RetryArg is the argument every tool takes besides its own: a call that
// ended (expired, denied, failed, ambiguous) is asked again, as a new
// request, with the same arguments and a new value here (it becomes the
// request's idempotency key). The gateway removes it before the tool's
// own schema checks the arguments.
const RetryArg = "_airlock_retry"

// Agent is the principal one MCP session acts as.
type Agent struct {
	// Name is the agent principal: every call is its request.
	Name string
	// Workspace is the workspace of the session's calls.
	Workspace string
	// Client submits as the agent (with the agent's key, so it opens
	// the agent's kept results).
	Client *producers.Client
}

// Config configures a Gateway.
type Config struct {
	// HoldWait is how long a call waits for its op, through a hold,
	// before it returns what it knows; default DefaultHoldWait.
	HoldWait time.Duration
	// ProgressEvery is the interval of progress notifications; default
	// DefaultProgressEvery.
	ProgressEvery time.Duration
	// Version is the gateway's version in the MCP handshake.
	Version string
	// Metrics counts calls; nil for none.
	Metrics *Metrics
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// EnsureDefaults fills in the defaults of what is unset.
func (c *Config) EnsureDefaults() {
	if c.HoldWait == 0 {
		c.HoldWait = DefaultHoldWait
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = DefaultProgressEvery
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks c and changes nothing.
func (c *Config) Validate() error {
	if c.HoldWait < 0 || c.HoldWait > MaxHoldWait {
		return fmt.Errorf("mcp gateway: hold wait %s is outside 0..%s", c.HoldWait, MaxHoldWait)
	}
	if c.ProgressEvery < 0 {
		return errors.New("mcp gateway: progress interval is negative")
	}
	return nil
}

// Gateway turns MCP tool calls into Airlock ops.
type Gateway struct {
	cfg Config

	mu      sync.Mutex
	tools   map[string]*tool
	servers []served
}

// served is one MCP server and the agent its calls act as.
type served struct {
	s *sdk.Server
	a *Agent
}

// tool is one tool of the catalog, ready to check args against.
type tool struct {
	info   events.ToolInfo
	schema *jsonschema.Schema // nil: args are checked as an object only
	raw    json.RawMessage    // the input schema shown to clients
	retry  bool               // raw has RetryArg, which the gateway takes
}

// New returns a gateway serving the tools of cat.
func New(cfg Config, cat *events.ToolCatalog) (*Gateway, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &Gateway{cfg: cfg, tools: map[string]*tool{}}
	g.tools = g.compile(cat)
	return g, nil
}

// compile makes the tools of cat; a tool whose schema does not compile
// has its args checked as an object only, and is logged.
func (g *Gateway) compile(cat *events.ToolCatalog) map[string]*tool {
	out := map[string]*tool{}
	for _, info := range cat.Tools {
		own := objectSchema(info.InputSchema)
		t := &tool{info: info}
		t.raw, t.retry = withRetry(own)
		c := jsonschema.NewCompiler()
		// A schema refers to nothing outside itself: no file or URL is
		// read on the gateway's host.
		c.UseLoader(jsonschema.SchemeURLLoader{})
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(own))
		if err == nil {
			err = c.AddResource("tool.json", doc)
		}
		if err == nil {
			t.schema, err = c.Compile("tool.json")
		}
		if err != nil {
			g.cfg.Logger.Warn("mcp gateway: a tool's input schema does not compile; its args are checked as an object only", "tool", info.Name, "err", err)
			t.schema = nil
		}
		out[info.Name] = t
	}
	return out
}

// withRetry adds RetryArg to an object schema's properties; ok is false
// (and s unchanged) when the tool has a property of that name itself.
func withRetry(s json.RawMessage) (json.RawMessage, bool) {
	var m map[string]any
	if json.Unmarshal(s, &m) != nil {
		return s, false
	}
	props, _ := m["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
	}
	if _, taken := props[RetryArg]; taken {
		return s, false
	}
	props[RetryArg] = map[string]any{
		"type": "string", "minLength": 1, "maxLength": events.MaxIdempotencyKeyBytes,
		"description": "Leave out. Only to ask again for a call that already ended (expired, denied, failed, ambiguous): the same arguments with a new value here are a new request.",
	}
	m["properties"] = props
	b, err := json.Marshal(m)
	if err != nil {
		return s, false
	}
	return b, true
}

// objectSchema is s when it is a JSON object schema ("type": "object",
// what MCP requires of an input schema), else an object schema.
func objectSchema(s json.RawMessage) json.RawMessage {
	var m map[string]any
	if json.Unmarshal(s, &m) != nil || m["type"] != "object" {
		return events.AnyObjectSchema
	}
	return s
}

// Server returns an MCP server whose tool calls act as a. The gateway
// keeps it up to date when the catalog changes (Update).
func (g *Gateway) Server(a *Agent) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "airlock", Title: "Airlock", Version: g.cfg.Version}, &sdk.ServerOptions{
		Instructions: "Tools run through Airlock: each call is checked by policy, may be held until a person approves it, runs at most once, and is recorded in a tamper-evident log. " +
			"A held call returns APPROVAL_REQUIRED with a hold id: ask the user to approve it, then call again with the same arguments to get the result.",
		Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true}},
		Logger:       g.cfg.Logger,
	})
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(g.tools)) {
		g.add(s, a, g.tools[name])
	}
	g.servers = append(g.servers, served{s: s, a: a})
	return s
}

// Update replaces the catalog: every server gets the new and changed
// tools and loses the ones gone (clients are told: tools/list_changed).
func (g *Gateway) Update(cat *events.ToolCatalog) {
	next := g.compile(cat)
	g.mu.Lock()
	defer g.mu.Unlock()
	var gone []string
	for name := range g.tools {
		if _, ok := next[name]; !ok {
			gone = append(gone, name)
		}
	}
	var changed []*tool
	for name, t := range next {
		if old, ok := g.tools[name]; !ok || !sameTool(old, t) {
			changed = append(changed, t)
		}
	}
	g.tools = next
	if len(gone) == 0 && len(changed) == 0 {
		return
	}
	g.cfg.Logger.Info("mcp gateway: the tools changed", "added_or_changed", len(changed), "removed", len(gone))
	for _, sv := range g.servers {
		if len(gone) > 0 {
			sv.s.RemoveTools(gone...)
		}
		for _, t := range changed {
			g.add(sv.s, sv.a, t)
		}
	}
}

func sameTool(a, b *tool) bool {
	return a.info.Class == b.info.Class && a.info.Description == b.info.Description &&
		bytes.Equal(a.raw, b.raw) && a.info.Upstream == b.info.Upstream
}

// add registers t on s, acting as a.
func (g *Gateway) add(s *sdk.Server, a *Agent, t *tool) {
	s.AddTool(&sdk.Tool{
		Name:        t.info.Name,
		Description: description(t.info),
		InputSchema: t.raw,
		Annotations: annotations(t.info.Class),
	}, g.handler(a, t))
}

// description is what the client shows the model.
func description(info events.ToolInfo) string {
	d := info.Description
	if d == "" {
		d = "Airlock tool " + info.Name + "."
	}
	return fmt.Sprintf("%s\n\nAirlock class: %s. The call may be held for a person's approval: it then returns APPROVAL_REQUIRED with a hold id; ask the user to approve it, then call again with the same arguments.", d, info.Class)
}

// annotations are the hints of a class.
func annotations(c events.Class) *sdk.ToolAnnotations {
	f, t := false, true
	a := &sdk.ToolAnnotations{ReadOnlyHint: c == events.ClassRead}
	switch c {
	case events.ClassRead, events.ClassWrite:
		a.DestructiveHint, a.OpenWorldHint = &f, &f
	case events.ClassNetwork:
		a.OpenWorldHint = &t
	case events.ClassDestructive:
		a.DestructiveHint = &t
	}
	return a
}

// handler is the tool call handler of t for agent a.
func (g *Gateway) handler(a *Agent, t *tool) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		start := time.Now()
		res, outcome, opID := g.call(ctx, a, t, req)
		g.cfg.Metrics.observe(t.info.Name, outcome, time.Since(start))
		session := ""
		if req.Session != nil {
			session = req.Session.ID()
		}
		g.cfg.Logger.Info("mcp call", "session", session, "agent", a.Name, "ws", a.Workspace, "tool", t.info.Name,
			"op", opID, "outcome", outcome, "duration_ms", time.Since(start).Milliseconds())
		return res, nil
	}
}

// call runs one tool call: it checks the args, submits the op and waits
// for it, and says how it went (the outcome label of the metrics).
func (g *Gateway) call(ctx context.Context, a *Agent, t *tool, req *sdk.CallToolRequest) (*sdk.CallToolResult, string, string) {
	r, refused := t.request(a, req.Params.Arguments)
	if refused != nil {
		code, _ := refused.StructuredContent.(map[string]any)["error_code"].(events.Code)
		return refused, outcomeLabel(code), ""
	}
	_, opID := r.Identity()
	wctx, cancel := context.WithTimeout(ctx, g.cfg.HoldWait)
	defer cancel()
	stop := g.progress(wctx, a, req, opID)
	out, err := a.Client.Submit(wctx, r)
	stop()
	if err != nil {
		if ctx.Err() != nil {
			// The client went away (cancelled the call): the op goes on.
			return toolError(events.CodePending, "the call was cancelled; op "+opID+" goes on", map[string]any{"op_id": opID}), "cancelled", opID
		}
		code := events.CodeOf(err)
		return toolError(code, err.Error(), map[string]any{"op_id": opID}), outcomeLabel(code), opID
	}
	res, label := render(t, out, g.cfg.HoldWait)
	return res, label, out.OpID
}

// request is the Airlock request of a call of t with raw arguments, as
// agent a; or, for arguments that are not the tool's, the tool error that
// says why (INVALID_ARGS, ARGS_TOO_LARGE, ...). Nothing is submitted for
// a refused call.
func (t *tool) request(a *Agent, raw json.RawMessage) (events.Request, *sdk.CallToolResult) {
	args := bytes.TrimSpace(raw)
	if len(args) == 0 || string(args) == "null" {
		args = []byte("{}")
	}
	if len(args) > 2*events.MaxArgsBytes {
		// Far over the limit: refused before the schema reads them
		// (Validate holds the canonical form to MaxArgsBytes).
		return events.Request{}, toolError(events.CodeArgsTooLarge, fmt.Sprintf("arguments are %d bytes; Airlock takes at most %d bytes of canonical JSON", len(args), events.MaxArgsBytes), nil)
	}
	key := ""
	if t.retry {
		var err error
		if args, key, err = takeRetry(args); err != nil {
			return events.Request{}, toolError(events.CodeInvalidArgs, err.Error(), nil)
		}
	}
	if err := t.check(args); err != nil {
		return events.Request{}, toolError(events.CodeInvalidArgs, err.Error(), nil)
	}
	r := events.Request{Workspace: a.Workspace, Agent: a.Name, Tool: t.info.Name, Args: json.RawMessage(args), IdempotencyKey: key}
	if err := r.Validate(); err != nil {
		return events.Request{}, toolError(events.CodeOf(err), err.Error(), nil)
	}
	return r, nil
}

// takeRetry removes RetryArg from args (an object) and returns it.
func takeRetry(args []byte) ([]byte, string, error) {
	if !bytes.Contains(args, []byte(RetryArg)) {
		return args, "", nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(args, &m); err != nil {
		return args, "", nil // not an object: check says so
	}
	raw, ok := m[RetryArg]
	if !ok {
		return args, "", nil
	}
	var key string
	if err := json.Unmarshal(raw, &key); err != nil || key == "" {
		return nil, "", fmt.Errorf("%s must be a non-empty string", RetryArg)
	}
	delete(m, RetryArg)
	out, err := json.Marshal(m)
	if err != nil {
		return nil, "", err
	}
	return out, key, nil
}

// check holds args to the tool's input schema.
func (t *tool) check(args []byte) error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return fmt.Errorf("arguments are not JSON: %v", err)
	}
	if _, ok := doc.(map[string]any); !ok {
		return errors.New("arguments must be a JSON object")
	}
	if t.schema == nil {
		return nil
	}
	if err := t.schema.Validate(doc); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return fmt.Errorf("arguments do not fit the tool's input schema: %s", firstLine(ve.Error()))
		}
		return fmt.Errorf("arguments do not fit the tool's input schema: %v", err)
	}
	return nil
}

func firstLine(s string) string {
	if i := bytes.IndexByte([]byte(s), '\n'); i >= 0 {
		return s[:i] + " " + squash(s[i+1:])
	}
	return s
}

// squash joins the lines of s with "; ", at most 1,000 bytes.
func squash(s string) string {
	var b bytes.Buffer
	for line := range bytes.Lines([]byte(s)) {
		if l := bytes.TrimSpace(line); len(l) > 0 {
			if b.Len() > 0 {
				b.WriteString("; ")
			}
			b.Write(l)
		}
	}
	if b.Len() > 1000 {
		b.Truncate(1000)
		b.WriteString("...")
	}
	return b.String()
}

// progress sends a progress notification every ProgressEvery while the
// call waits, saying where the op stands, to a client that asked for
// them (a progress token). stop ends it.
func (g *Gateway) progress(ctx context.Context, a *Agent, req *sdk.CallToolRequest, opID string) (stop func()) {
	tok := req.Params.GetProgressToken()
	if tok == nil || req.Session == nil || g.cfg.ProgressEvery <= 0 {
		return func() {}
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(g.cfg.ProgressEvery)
		defer tick.Stop()
		start := time.Now()
		for {
			select {
			case <-pctx.Done():
				return
			case <-tick.C:
			}
			msg := "waiting for op " + opID
			if op, err := a.Client.Op(pctx, opID); err == nil {
				msg = waitingFor(op)
			}
			_ = req.Session.NotifyProgress(pctx, &sdk.ProgressNotificationParams{
				ProgressToken: tok, Progress: time.Since(start).Seconds(), Total: g.cfg.HoldWait.Seconds(), Message: msg,
			})
		}
	}()
	return func() { cancel(); <-done }
}

// waitingFor says what a waiting op waits for.
func waitingFor(op *events.Op) string {
	switch op.State {
	case events.StateHeld:
		return fmt.Sprintf("op %s is held for approval (hold %s); waiting for a person to approve it", op.ID, op.HoldID)
	case events.StateExecuting:
		return fmt.Sprintf("op %s is running", op.ID)
	}
	return fmt.Sprintf("op %s is %s", op.ID, op.State)
}

// render is the tool result of an outcome.
func render(t *tool, out producers.Outcome, waited time.Duration) (*sdk.CallToolResult, string) {
	base := map[string]any{"op_id": out.OpID, "state": out.State}
	switch {
	case out.State == events.StateCompleted:
		return completed(t, out, base), "completed"
	case out.Held():
		base["error_code"] = events.CodeApprovalRequired
		base["hold_id"] = out.HoldID
		base["args_digest"] = out.ArgsDigest
		until := "its hold expires"
		if out.HoldExpiresAt != nil {
			base["expires_at"] = out.HoldExpiresAt.UTC().Format(time.RFC3339Nano)
			until = out.HoldExpiresAt.UTC().Format(time.RFC3339)
		}
		return toolError(events.CodeApprovalRequired, fmt.Sprintf(
			"held for approval: hold id %s (op %s); nobody approved it within %s. Ask the user to approve hold %s before %s, then call this tool again with the same arguments to get its result; a call with other arguments is another request. Do not try to approve it yourself: only an approver can.",
			out.HoldID, out.OpID, waited, out.HoldID, until), base), "held"
	case out.Pending || !out.Terminal():
		return toolError(events.CodePending, fmt.Sprintf(
			"op %s is %s and goes on; call this tool again with the same arguments to get its outcome", out.OpID, stateWord(out)), base), "pending"
	}
	code := out.Code
	if code == "" {
		code = events.CodeInternal
	}
	advice := map[events.State]string{
		events.StateDenied:    "The policy refuses this call; calling again returns the same answer.",
		events.StateExpired:   "Nobody approved it in time. The same call again returns this answer; to ask again, ask the user first, then call with the same arguments and a new " + RetryArg + " value.",
		events.StateFailed:    "Nothing took effect unless the message says otherwise. The same call again returns this answer; to try again, call with the same arguments and a new " + RetryArg + " value.",
		events.StateAmbiguous: "It may have taken effect, in whole or in part; Airlock never runs it again. Check its effect before doing anything else.",
	}[out.State]
	return toolError(code, fmt.Sprintf("op %s ended %s: %s. %s", out.OpID, out.State, out.Message, advice), base), string(out.State)
}

func stateWord(out producers.Outcome) string {
	if out.State == "" {
		return "accepted"
	}
	return string(out.State)
}

// completed is the tool result of a completed op: the output as MCP
// content, and op_id, state and result_digest as structured content.
func completed(t *tool, out producers.Outcome, sc map[string]any) *sdk.CallToolResult {
	sc["result_digest"] = out.ResultDigest
	if out.Result == nil {
		msg := fmt.Sprintf("op %s completed (result %s, %d bytes), and its result is not available: %s %s. It is not run again.", out.OpID, out.ResultDigest, out.ResultBytes, out.ResultCode, out.ResultError)
		sc["result_code"] = out.ResultCode
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: msg}}, StructuredContent: sc}
	}
	if t.info.Upstream != "" {
		var up mcp.Result
		var res sdk.CallToolResult
		if json.Unmarshal(out.Result, &up) == nil && json.Unmarshal(out.Result, &res) == nil {
			if up.StructuredContent != nil {
				sc["result"] = up.StructuredContent
			}
			res.StructuredContent = sc
			if res.Content == nil {
				res.Content = []sdk.Content{}
			}
			return &res
		}
	}
	sc["result"] = out.Result
	var pretty bytes.Buffer
	if json.Indent(&pretty, out.Result, "", "  ") != nil {
		pretty.Reset()
		pretty.Write(out.Result)
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: pretty.String()}}, StructuredContent: sc}
}

// toolError is a tool result with IsError: the model reads the text; a
// program reads error_code and the rest of the structured content.
func toolError(code events.Code, msg string, sc map[string]any) *sdk.CallToolResult {
	if sc == nil {
		sc = map[string]any{}
	}
	sc["error_code"] = code
	sc["error"] = msg
	return &sdk.CallToolResult{
		Content:           []sdk.Content{&sdk.TextContent{Text: string(code) + ": " + msg}},
		StructuredContent: sc,
		IsError:           true,
	}
}

// outcomeLabel is the metrics label of a call refused with code.
func outcomeLabel(code events.Code) string {
	switch code {
	case events.CodeInvalidArgs, events.CodeArgsTooLarge, events.CodeRequestTooLarge, events.CodeInvalidName, events.CodeInvalidIdempotencyKey:
		return "invalid_args"
	case events.CodeUnavailable:
		return "unavailable"
	}
	return "error"
}
