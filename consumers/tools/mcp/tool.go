package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/failpoint"
	"github.com/airlock-dev/airlock/internal/ledger"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Tool is the executor of one upstream tool.
type Tool struct {
	u      *Upstream
	name   string // the Airlock tool name
	remote string // the upstream's name for it
	class  events.Class
	desc   executor.Description
	ledger ledger.Ledger
}

var (
	_ executor.Executor  = (*Tool)(nil)
	_ executor.Operands  = (*Tool)(nil)
	_ executor.Keeper    = (*Tool)(nil)
	_ executor.Describer = (*Tool)(nil)
)

// Tool is the Airlock tool name, <upstream>__<tool>.
func (t *Tool) Tool() string { return t.name }

// Class is the configured class, raised by the tool's annotations.
func (t *Tool) Class() events.Class { return t.class }

// Describe is the upstream's description and input schema, as listed
// when the executor was made.
func (t *Tool) Describe() executor.Description { return t.desc }

// Result is what a completed op of an upstream tool stores: the
// upstream's answer as MCP has it.
type Result struct {
	Content           []json.RawMessage `json:"content"`
	StructuredContent json.RawMessage   `json:"structuredContent,omitempty"`
	IsError           bool              `json:"isError,omitempty"`
}

// started is the ledger record written before a call is sent.
type started struct {
	Attempt    string    `json:"attempt"`
	Upstream   string    `json:"upstream"`
	Tool       string    `json:"tool"`
	ArgsDigest string    `json:"args_digest"`
	SentAt     time.Time `json:"sent_at"`
}

// Execute sends the call once and records its answer. A call that could
// not be sent fails (REMOTE_UNAVAILABLE, "nothing was sent"), one the
// upstream refused with a JSON-RPC error fails (EXECUTOR_FAILED), and a
// call without an answer is ambiguous and never sent again.
func (t *Tool) Execute(ctx context.Context, c executor.Call) (json.RawMessage, error) {
	if err := t.checkArgs(c.Args); err != nil {
		return nil, err
	}
	args := bytes.TrimSpace(c.Args)
	s, _, err := t.u.connect(ctx)
	if err != nil {
		return nil, events.Errorf(events.CodeRemoteUnavailable, "%v; nothing was sent", err)
	}
	log := t.u.cfg.Logger.With("op", c.OpID, "attempt", c.Attempt, "tool", t.name)
	rec, _ := json.Marshal(started{Attempt: c.Attempt, Upstream: t.u.cfg.Name, Tool: t.remote, ArgsDigest: events.ArgsDigest(c.Args), SentAt: time.Now().UTC()})
	startedAt, err := t.ledger.Begin(c.OpID, c.Attempt, rec)
	if err != nil {
		if errors.Is(err, ledger.ErrStarted) {
			return nil, events.Errorf(events.CodeAmbiguous, "%s: attempt %s was sent before; it is never sent again", t.name, c.Attempt)
		}
		return nil, events.Errorf(events.CodeExecutorFailed, "%s: %v; nothing was sent", t.name, err)
	}
	sent := time.Now()
	cctx, cancel := context.WithTimeout(ctx, t.u.cfg.Timeout)
	res, err := s.CallTool(cctx, &sdk.CallToolParams{Name: t.remote, Arguments: json.RawMessage(args)})
	cancel()
	failpoint.Hit(failpoint.AfterEffect, t.name)
	if errors.Is(err, sdk.ErrConnectionClosed) {
		// The session was closed before the call was written (the SDK
		// refuses to start a call on a closing connection): nothing was
		// sent, and the record goes.
		t.u.drop(s)
		if aerr := startedAt.Abandon(); aerr != nil {
			// Left in place, the record makes a recovery say ambiguous
			// for a call that was never sent: wrong, but never twice.
			log.Error("mcp: removing the record of a call that was never sent", "err", aerr)
		}
		return nil, events.Errorf(events.CodeRemoteUnavailable, "%s: the session with MCP server %s closed before the call was sent: %v; nothing was sent", t.name, t.u.cfg.Name, err)
	}
	if err != nil {
		err = t.unanswered(ctx, s, sent, err, log)
		t.observe(err, sent)
		return nil, err
	}
	if res.IsError {
		t.observeAs("tool_error", sent)
	} else {
		t.observe(nil, sent)
	}
	body, err := encodeResult(res)
	if err != nil {
		return nil, events.Errorf(events.CodeAmbiguous, "%s: the upstream answered at %s with a result Airlock cannot keep: %v; the call may have taken effect and is never sent again",
			t.name, stamp(time.Now()), err)
	}
	if err := t.ledger.Finish(c.OpID, c.Attempt, body); err != nil {
		// The result still goes to the runner, which stores it; only a
		// crash before that leaves the op ambiguous.
		log.Error("mcp: recording the answer in the ledger", "err", err)
	}
	log.Debug("mcp call answered", "is_error", res.IsError, "duration_ms", time.Since(sent).Milliseconds())
	return body, nil
}

// checkArgs refuses args that are no JSON object: MCP tool arguments are
// one.
func (t *Tool) checkArgs(args json.RawMessage) error {
	a := bytes.TrimSpace(args)
	if len(a) == 0 || a[0] != '{' || !json.Valid(a) {
		return events.Errorf(events.CodeInvalidArgs, "%s: args must be a JSON object (MCP tool arguments)", t.name)
	}
	return nil
}

// observe tells Config.Observe how a sent call ended.
func (t *Tool) observe(err error, sent time.Time) {
	switch {
	case err == nil:
		t.observeAs("answered", sent)
	case errors.Is(err, events.ErrAmbiguous):
		t.observeAs("ambiguous", sent)
	case errors.Is(err, events.ErrExecutorFailed):
		t.observeAs("refused", sent)
	default:
		t.observeAs("interrupted", sent)
	}
}

func (t *Tool) observeAs(outcome string, sent time.Time) {
	if t.u.cfg.Observe != nil {
		t.u.cfg.Observe(t.name, outcome, time.Since(sent))
	}
}

// unanswered is the error of a call that was sent and got no result.
func (t *Tool) unanswered(ctx context.Context, s *sdk.ClientSession, sent time.Time, err error, log *slog.Logger) error {
	var rpc *jsonrpc.Error
	if errors.As(err, &rpc) && refusal(rpc.Code) {
		// The upstream refused the call before handling it (it could
		// not parse it, or it has no such method or tool, or the params
		// are not its): nothing ran. The session is sound.
		return events.Errorf(events.CodeExecutorFailed, "%s: the upstream refused the call: JSON-RPC error %d: %s; nothing ran", t.name, rpc.Code, rpc.Message)
	}
	if rpc != nil {
		// Any other JSON-RPC error (internal error, a server's own
		// code) may come after the tool did its work.
		return events.Errorf(events.CodeAmbiguous, "%s: call sent to MCP server %s at %s; it answered JSON-RPC error %d: %s, which does not say whether the tool ran; it is never sent again",
			t.name, t.u.cfg.Name, stamp(sent), rpc.Code, rpc.Message)
	}
	t.u.drop(s)
	if ctx.Err() != nil {
		return fmt.Errorf("%s: call sent at %s, interrupted: %w", t.name, stamp(sent), ctx.Err())
	}
	why := err.Error()
	if errors.Is(err, context.DeadlineExceeded) {
		why = fmt.Sprintf("no answer within %s", t.u.cfg.Timeout)
	}
	log.Warn("mcp: call sent, no answer", "err", err)
	return events.Errorf(events.CodeAmbiguous, "%s: call sent to MCP server %s at %s; %s; it may have taken effect and is never sent again",
		t.name, t.u.cfg.Name, stamp(sent), why)
}

// refusal reports whether a JSON-RPC error code says the request was
// refused before it was handled: parse error, invalid request, method
// not found, invalid params (which the SDKs answer for an unknown tool).
func refusal(code int64) bool {
	switch code {
	case jsonrpc.CodeParseError, jsonrpc.CodeInvalidRequest, jsonrpc.CodeMethodNotFound, jsonrpc.CodeInvalidParams:
		return true
	}
	return false
}

// encodeResult is the stored form of the upstream's answer.
func encodeResult(res *sdk.CallToolResult) (json.RawMessage, error) {
	r := Result{Content: []json.RawMessage{}, IsError: res.IsError}
	for _, c := range res.Content {
		b, err := json.Marshal(c)
		if err != nil {
			return nil, fmt.Errorf("content: %w", err)
		}
		r.Content = append(r.Content, b)
	}
	if res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return nil, fmt.Errorf("structured content: %w", err)
		}
		r.StructuredContent = b
	}
	body, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if len(body) > events.MaxResultBytes {
		return nil, fmt.Errorf("%d bytes, over the %d Airlock stores", len(body), events.MaxResultBytes)
	}
	return body, nil
}

// Recover decides from the ledger: an answer recorded means Done with
// it; a call recorded as sent without an answer is ambiguous; no record
// of this instance's own attempt proves nothing was sent (Rerun); another
// instance's attempt only its ledger can tell (Defer).
func (t *Tool) Recover(_ context.Context, c executor.Call, lost executor.Lost) (executor.Recovery, error) {
	b, err := t.ledger.Done(c.OpID, lost.Attempt)
	switch {
	case err == nil && json.Valid(b):
		return executor.Recovery{Action: executor.Done, Result: b}, nil
	case err == nil:
		return executor.Recovery{Action: executor.Ambiguous, Known: fmt.Sprintf("%s: attempt %s was answered; the recorded answer is unreadable; it is never sent again", t.name, lost.Attempt)}, nil
	case !errors.Is(err, fs.ErrNotExist):
		return executor.Recovery{}, err
	}
	b, err = t.ledger.Started(c.OpID, lost.Attempt)
	switch {
	case errors.Is(err, fs.ErrNotExist) && lost.Own:
		return executor.Recovery{Action: executor.Rerun}, nil
	case errors.Is(err, fs.ErrNotExist):
		return executor.Recovery{Action: executor.Defer, Known: fmt.Sprintf("%s: attempt %s may have been sent by another instance, whose ledger alone can tell; it is never sent again", t.name, lost.Attempt)}, nil
	case err != nil:
		return executor.Recovery{}, err
	}
	var rec started
	when := "at an unknown time"
	if json.Unmarshal(b, &rec) == nil && !rec.SentAt.IsZero() {
		when = "at " + stamp(rec.SentAt)
	}
	return executor.Recovery{Action: executor.Ambiguous, Known: fmt.Sprintf("%s: attempt %s was sent to MCP server %s %s and no answer was recorded; it may have taken effect and is never sent again",
		t.name, lost.Attempt, t.u.cfg.Name, when)}, nil
}

// Operands is the digest of the tool's definition as the upstream lists
// it now, under the key mcp:<upstream>/<tool>; "absent" once it lists no
// such tool. It lists the tools again every time (the runner's check
// before the call); an upstream that cannot list them now fails the call
// with REMOTE_UNAVAILABLE, nothing sent: an old listing never stands for
// what is about to be called.
func (t *Tool) Operands(ctx context.Context, _ string, args json.RawMessage) (map[string]string, error) {
	if err := t.checkArgs(args); err != nil {
		return nil, err
	}
	def, err := t.u.definition(ctx, t.remote)
	if err != nil {
		return nil, events.Errorf(events.CodeRemoteUnavailable, "%v; nothing was sent", err)
	}
	return t.operands(def), nil
}

// DecisionOperands is Operands for the gate's decision: from a listing
// younger than CacheFor that no tools/list_changed made stale, so that a
// slow upstream does not hold up the gate; else as Operands. The runner
// checks again with Operands before the call.
func (t *Tool) DecisionOperands(ctx context.Context, ws string, args json.RawMessage) (map[string]string, error) {
	if err := t.checkArgs(args); err != nil {
		return nil, err
	}
	if def, ok := t.u.recent(t.remote); ok {
		return t.operands(def), nil
	}
	return t.Operands(ctx, ws, args)
}

func (t *Tool) operands(def *sdk.Tool) map[string]string {
	return map[string]string{"mcp:" + t.u.cfg.Name + "/" + t.remote: definitionDigest(def)}
}

// Forget removes the op's ledger records.
func (t *Tool) Forget(_ context.Context, opID string) error { return t.ledger.Forget(opID) }

// Kept lists the ops the ledger holds records of.
func (t *Tool) Kept(context.Context) ([]string, error) { return t.ledger.Kept() }

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// logWriter logs what a launched upstream writes to its stderr, a line
// at a time.
type logWriter struct {
	log      *slog.Logger
	upstream string
}

func (w logWriter) Write(p []byte) (int, error) {
	for line := range bytes.Lines(p) {
		if l := bytes.TrimSpace(line); len(l) > 0 {
			w.log.Info("mcp upstream stderr", "upstream", w.upstream, "line", string(l))
		}
	}
	return len(p), nil
}
