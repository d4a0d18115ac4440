package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/failpoint"
	"github.com/nats-io/nats.go"
)

// Limits and defaults of Config.
const (
	DefaultTool          = "remote"
	DefaultTimeout       = 30 * time.Second
	MaxTimeout           = 10 * time.Minute
	DefaultStatusTimeout = 5 * time.Second
	MaxStatusTimeout     = time.Minute
)

// Config configures a Remote.
type Config struct {
	// Conn is the connection calls and status queries go over; the Remote
	// does not close it. Required.
	Conn *nats.Conn
	// Tool is the tool name the Remote serves; default "remote". One
	// Remote serves one tool.
	Tool string
	// Subject is where the tool server listens for calls, a literal NATS
	// subject (no wildcards) outside airlock.>, _INBOX.> and $...; its
	// status queries go to Subject+".status". Required.
	Subject string
	// Timeout is how long a call may take before Airlock asks the status;
	// default 30s, at most 10m.
	Timeout time.Duration
	// StatusTimeout is how long a status query may take; default 5s, at
	// most 1m.
	StatusTimeout time.Duration
	// Class is the tool's capability class; default network.
	Class events.Class
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// EnsureDefaults fills in the defaults of what is unset.
func (c *Config) EnsureDefaults() {
	if c.Tool == "" {
		c.Tool = DefaultTool
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.StatusTimeout == 0 {
		c.StatusTimeout = DefaultStatusTimeout
	}
	if c.Class == "" {
		c.Class = events.ClassNetwork
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks the config, as EnsureDefaults left it; it changes
// nothing.
func (c *Config) Validate() error {
	if c.Conn == nil {
		return errors.New("remote: Conn is required")
	}
	if !events.ValidName(c.Tool) {
		return fmt.Errorf("remote: tool %q must match [a-z0-9][a-z0-9_-]{0,63}", c.Tool)
	}
	if err := validSubject(c.Subject); err != nil {
		return fmt.Errorf("remote: subject %q: %w", c.Subject, err)
	}
	if c.Timeout < 0 || c.Timeout > MaxTimeout {
		return fmt.Errorf("remote: Timeout %s outside (0, %s]", c.Timeout, MaxTimeout)
	}
	if c.StatusTimeout < 0 || c.StatusTimeout > MaxStatusTimeout {
		return fmt.Errorf("remote: StatusTimeout %s outside (0, %s]", c.StatusTimeout, MaxStatusTimeout)
	}
	if events.ParseClass(string(c.Class)) != c.Class {
		return fmt.Errorf("remote: unknown class %q", c.Class)
	}
	return nil
}

// validSubject accepts a literal subject a tool server may own.
func validSubject(s string) error {
	switch {
	case s == "":
		return errors.New("required")
	case strings.ContainsAny(s, " \t\r\n"):
		return errors.New("contains white space")
	case strings.HasPrefix(s, "airlock.") || strings.HasPrefix(s, "_INBOX.") || strings.HasPrefix(s, "$"):
		return errors.New("airlock.>, _INBOX.> and $... are reserved")
	}
	for tok := range strings.SplitSeq(s, ".") {
		switch tok {
		case "":
			return errors.New("has an empty token")
		case "*", ">":
			return errors.New("has a wildcard")
		}
	}
	return nil
}

// Remote is the executor of one remote tool: it forwards each call over
// NATS request/reply to a tool server and, when the answer is lost, asks
// the server's status subject what became of it (docs/remote.md). It is
// safe for concurrent use.
type Remote struct {
	cfg Config
}

// New returns a Remote for cfg.
func New(cfg Config) (*Remote, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Remote{cfg: cfg}, nil
}

// Tool is the configured tool name.
func (r *Remote) Tool() string { return r.cfg.Tool }

// Class is the configured class.
func (r *Remote) Class() events.Class { return r.cfg.Class }

// Subject is where calls go.
func (r *Remote) Subject() string { return r.cfg.Subject }

// StatusSubject is where status queries go.
func (r *Remote) StatusSubject() string { return r.cfg.Subject + StatusSuffix }

// Execute sends the call to the tool server and returns its result.
//
//   - A reply with a result: the result.
//   - A reply with an error: the op fails. Its code is the server's when it
//     is INVALID_ARGS or ARGS_TOO_LARGE, EXECUTOR_FAILED naming the
//     server's code otherwise; a server's EXECUTION_AMBIGUOUS ends the op
//     ambiguous with the server's message.
//   - Nothing sent, or no server listening (NATS "no responders"):
//     REMOTE_UNAVAILABLE; nothing received the call.
//   - Sent, and no reply it can read (timeout, connection lost, a reply
//     that is not protocol v1): it asks the status. done settles it as
//     the server recorded it, never fails it with REMOTE_UNAVAILABLE,
//     anything else is EXECUTION_AMBIGUOUS saying what is known.
//   - ctx ended (shutdown): ctx's error, and recovery decides later.
func (r *Remote) Execute(ctx context.Context, c executor.Call) (json.RawMessage, error) {
	args := c.Args
	if len(args) == 0 {
		args = json.RawMessage("null")
	}
	body, err := json.Marshal(Request{
		V: Version, OpID: c.OpID, Attempt: c.Attempt, Workspace: c.Workspace,
		Agent: c.Agent, Tool: c.Tool, Args: args,
	})
	if err != nil {
		return nil, events.Errorf(events.CodeInvalidArgs, "args: %v", err)
	}
	nc := r.cfg.Conn
	// A fresh inbox of its own, not the connection's request mux: NATS
	// sends "no responders" to one subscription of the reply subject, and
	// it must be this one.
	sub, err := nc.SubscribeSync(nc.NewInbox())
	if err != nil {
		return nil, r.unsent(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	msg := &nats.Msg{Subject: r.cfg.Subject, Reply: sub.Subject, Data: body, Header: nats.Header{}}
	msg.Header.Set(HeaderOpID, c.OpID)
	msg.Header.Set(HeaderAttempt, c.Attempt)
	sent := time.Now()
	if err := nc.PublishMsg(msg); err != nil {
		return nil, r.unsent(err)
	}

	wctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	m, err := sub.NextMsgWithContext(wctx)
	var why string
	switch {
	case err == nil:
		rep, derr := DecodeReply(m.Data)
		if derr == nil {
			return r.settle(c, rep.Result, rep.Error)
		}
		why = "its reply is not protocol v1 (" + derr.Error() + ")"
	case errors.Is(err, nats.ErrNoResponders):
		return nil, events.Errorf(events.CodeRemoteUnavailable, "no tool server listens on %s; nothing received the call", r.cfg.Subject)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("remote call to %s: %w", r.cfg.Subject, ctx.Err())
	case errors.Is(err, context.DeadlineExceeded):
		why = fmt.Sprintf("no answer in %s", r.cfg.Timeout)
	default:
		why = "waiting for the answer: " + err.Error()
	}
	r.cfg.Logger.Debug("remote call unanswered; asking its status", "op", c.OpID, "subject", r.cfg.Subject, "err", why)
	return r.lost(ctx, c, sent, why)
}

// unsent is the error of a call that never left the connection.
func (r *Remote) unsent(err error) error {
	return events.Errorf(events.CodeRemoteUnavailable, "remote call to %s not sent: %v", r.cfg.Subject, err)
}

// lost settles a call that was sent and got no reply Execute could use
// (why says what happened instead), from the server's status.
func (r *Remote) lost(ctx context.Context, c executor.Call, sent time.Time, why string) (json.RawMessage, error) {
	st, said := r.query(ctx, c.OpID, c.Attempt)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("remote call to %s: %w", r.cfg.Subject, ctx.Err())
	}
	if st != nil {
		switch st.State {
		case StateDone:
			return r.settle(c, st.Result, st.Error)
		case StateNever:
			return nil, events.Errorf(events.CodeRemoteUnavailable,
				"remote call to %s sent at %s; %s; status: never (the tool server did not run it and will not)",
				r.cfg.Subject, stamp(sent), why)
		}
	}
	return nil, events.Errorf(events.CodeAmbiguous, "remote call to %s sent at %s; %s; status: %s",
		r.cfg.Subject, stamp(sent), why, said)
}

// settle turns a server's outcome into Execute's.
func (r *Remote) settle(c executor.Call, result json.RawMessage, e *Error) (json.RawMessage, error) {
	if e != nil {
		return nil, r.failure(e)
	}
	failpoint.Hit(failpoint.AfterEffect, c.Tool)
	if err := r.storable(result); err != nil {
		return nil, err
	}
	return result, nil
}

// storable refuses a result Airlock could not store: the call took effect,
// so failing the op (which promises no effect) would be a lie; it ends
// ambiguous, saying so.
func (r *Remote) storable(result json.RawMessage) *events.Error {
	var buf bytes.Buffer
	if err := json.Compact(&buf, result); err != nil {
		return events.Errorf(events.CodeAmbiguous, "tool server on %s answered with a result of %d bytes that is not JSON; the call may have taken effect", r.cfg.Subject, len(result))
	}
	if buf.Len() > events.MaxResultBytes {
		return events.Errorf(events.CodeAmbiguous, "tool server on %s ran the call, but its result is %d bytes, over the %d Airlock stores; the effect took place and the result is lost", r.cfg.Subject, buf.Len(), events.MaxResultBytes)
	}
	return nil
}

// failure is the op error for a server's error. The op's events store
// it, so it keeps the server's code and not its message, which is the
// tool's output and may quote the args: only the message's size is said.
func (r *Remote) failure(e *Error) *events.Error {
	msg := describeMessage(e.Message)
	switch code := events.Code(e.Code); code {
	case events.CodeAmbiguous:
		return events.Errorf(code, "tool server on %s: %s", r.cfg.Subject, msg)
	case events.CodeInvalidArgs, events.CodeArgsTooLarge:
		return events.Errorf(code, "tool server on %s: %s", r.cfg.Subject, msg)
	}
	return events.Errorf(events.CodeExecutorFailed, "tool server on %s: %s: %s", r.cfg.Subject, serverCode(e.Code), msg)
}

// describeMessage says how long a server's error message was, without it.
func describeMessage(m string) string {
	if m == "" {
		return "no message"
	}
	return fmt.Sprintf("a message of %d bytes, not kept", len(m))
}

// serverCode is a server's error code as a message may show it: an
// UPPER_SNAKE code as it is, anything else only by its size.
func serverCode(c string) string {
	for i := 0; i < len(c); i++ {
		if b := c[i]; !(b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_') {
			return fmt.Sprintf("a code of %d bytes that is not UPPER_SNAKE", len(c))
		}
	}
	return c
}

// stamp formats a send time for a message.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

var _ executor.Executor = (*Remote)(nil)
