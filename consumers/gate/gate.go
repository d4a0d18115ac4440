package gate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/pull"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Source is the ce-source of the events the gate writes.
const Source = "airlock/gate"

// Config configures a Gate.
type Config struct {
	// Conn answers Airlock-Reply-To inboxes. Required.
	Conn *nats.Conn
	// JetStream reads requests and appends op events. Required.
	JetStream jetstream.JetStream
	// Policy decides each request. Required.
	Policy *policy.Policy
	// Tools, when set, lists the tools some executor serves: a request the
	// policy allows for any other tool is denied with NO_EXECUTOR rather
	// than left ready for ever. Nil when executors run elsewhere.
	Tools map[string]bool
	// Loops is how many batches are handled at once; default 4.
	Loops int
	// MaxBatch bounds the requests of one batch; default 256.
	MaxBatch int
	// AckWait is how long a request may be in hand before JetStream
	// redelivers it; default 30s.
	AckWait time.Duration
	// RetryDelay is the redelivery delay after a transient failure;
	// default 1s.
	RetryDelay time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Validate checks the config and fills defaults.
func (c *Config) Validate() error {
	if c.Conn == nil || c.JetStream == nil || c.Policy == nil {
		return errors.New("gate: Conn, JetStream and Policy are required")
	}
	if c.Loops <= 0 {
		c.Loops = 4
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 256
	}
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.RetryDelay <= 0 {
		c.RetryDelay = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Gate is the request consumer. Run it once.
type Gate struct {
	cfg Config
	ops jetstream.Stream
}

// New returns a gate.
func New(cfg Config) (*Gate, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Gate{cfg: cfg}, nil
}

// Run handles requests until ctx ends.
func (g *Gate) Run(ctx context.Context) error {
	js := g.cfg.JetStream
	st, err := js.Stream(ctx, streams.Ops)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("gate: %w", err)
	}
	g.ops = st
	cons, err := js.CreateOrUpdateConsumer(ctx, streams.Requests, jetstream.ConsumerConfig{
		Durable:       streams.GateConsumer,
		Description:   "Airlock gate: requests to ops",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       g.cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: 4 * g.cfg.Loops * g.cfg.MaxBatch,
	})
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("gate: consumer: %w", err)
	}
	return pull.Batches(ctx, cons, pull.Config{Loops: g.cfg.Loops, Max: g.cfg.MaxBatch, Heartbeat: g.cfg.AckWait / 3}, g.handleBatch)
}

// admission is one request of a batch on its way to an op.
type admission struct {
	m      jetstream.Msg
	req    *events.Request
	reqSeq uint64
	opID   string
	state  events.State
	append *oplog.Pending
	reply  *events.Reply // nil: the executor answers
	done   bool          // settled (acked or naked)
}

// handleBatch settles a batch of request messages with one round trip in
// all: the ops' first events are appended together, then every request is
// acked.
func (g *Gate) handleBatch(ctx context.Context, msgs []jetstream.Msg) {
	wctx, cancel := context.WithTimeout(ctx, g.cfg.AckWait/2)
	defer cancel()
	adms := make([]*admission, 0, len(msgs))
	for _, m := range msgs {
		if a := g.start(ctx, m); a != nil {
			adms = append(adms, a)
		}
	}
	for _, a := range adms {
		seq, err := a.append.Wait(wctx, g.ops)
		switch {
		case errors.Is(err, oplog.ErrConflict):
			r, err := g.existing(wctx, a.req, a.opID)
			if err != nil {
				g.retry(a.m, "existing "+a.opID, err)
				continue
			}
			a.reply = &r
		case err != nil:
			g.retry(a.m, "admit "+a.opID, err)
			continue
		default:
			if r, ok := events.OutcomeReply(a.append.Data()); ok {
				a.reply = &r
			}
			g.cfg.Logger.Debug("op admitted", "op", a.opID, "ws", a.req.Workspace, "state", a.state, "seq", seq)
		}
		if a.reply != nil {
			g.reply(replyTo(a.m), *a.reply)
		}
		_ = a.m.Ack()
	}
}

// start parses one request and starts the append of its op's first event.
// A request that is bad input is rejected and settled here (nil result).
func (g *Gate) start(ctx context.Context, m jetstream.Msg) *admission {
	md, err := m.Metadata()
	if err != nil {
		g.cfg.Logger.Error("request metadata", "subject", m.Subject(), "err", err)
		_ = m.Term()
		return nil
	}
	req, rerr := g.parse(m)
	if rerr != nil {
		if err := g.reject(ctx, m, md.Sequence.Stream, rerr); err != nil {
			g.retry(m, "reject", err)
			return nil
		}
		g.reply(replyTo(m), events.Reply{Code: rerr.Code, Message: rerr.Message})
		_ = m.Ack()
		return nil
	}
	fp, opID := req.Identity()
	a := &admission{m: m, req: req, reqSeq: md.Sequence.Stream, opID: opID}
	typ, data := g.firstEvent(req, fp, a.opID, a.reqSeq)
	a.state = events.StateReady
	if _, ok := data.(*events.Denied); ok {
		a.state = events.StateDenied
	}
	op := oplog.Op{Workspace: req.Workspace, ID: a.opID, Tool: req.Tool}
	a.append = oplog.Start(g.cfg.JetStream, op, 0, typ, Source, data, oplog.ReplyTo(replyTo(m)))
	return a
}

func (g *Gate) retry(m jetstream.Msg, what string, err error) {
	g.cfg.Logger.Warn("gate will retry", "subject", m.Subject(), "what", what, "err", err)
	_ = m.NakWithDelay(g.cfg.RetryDelay)
}

// parse validates a request message. Its error is always an *events.Error.
func (g *Gate) parse(m jetstream.Msg) (*events.Request, *events.Error) {
	fail := func(err error) (*events.Request, *events.Error) {
		var e *events.Error
		if !errors.As(err, &e) {
			e = events.Errorf(events.CodeInvalidEvent, "%v", err)
		}
		return nil, e
	}
	if n := len(m.Data()); n > events.MaxRequestBytes {
		return fail(events.Errorf(events.CodeRequestTooLarge, "request body is %d bytes, limit %d", n, events.MaxRequestBytes))
	}
	ev, err := events.Decode(m.Headers(), m.Data())
	if err != nil {
		return fail(err)
	}
	if t := events.Type(ev.Type()); t != events.TypeRequested {
		if !t.Known() {
			return fail(events.Errorf(events.CodeUnknownEventType, "unknown event type %q on a request subject", ev.Type()))
		}
		return fail(events.Errorf(events.CodeInvalidEvent, "only %s may be published on request subjects, got %s", events.TypeRequested, t))
	}
	data, err := events.DecodeData(ev)
	if err != nil {
		return fail(err)
	}
	req := data.(*events.Request)
	if err := req.Validate(); err != nil {
		return fail(err)
	}
	if ws := subjectWorkspace(m.Subject()); ws != req.Workspace {
		return fail(events.Errorf(events.CodeSubjectMismatch, "published on %s but names workspace %q", m.Subject(), req.Workspace))
	}
	return req, nil
}

// subjectWorkspace is the workspace a request subject names, or
// events.NoWorkspace when it names no valid one.
func subjectWorkspace(subject string) string {
	ws := strings.TrimPrefix(subject, events.SubjectRoot+".req.")
	if ws == subject || !events.ValidName(ws) {
		return events.NoWorkspace
	}
	return ws
}

// firstEvent is the op's first event for a valid request: decided when
// policy allows it, denied otherwise. Either carries the request summary.
func (g *Gate) firstEvent(req *events.Request, fingerprint, opID string, reqSeq uint64) (events.Type, any) {
	d := g.cfg.Policy.Decide(req)
	if d.Outcome == policy.Allow && g.cfg.Tools != nil && !g.cfg.Tools[req.Tool] {
		d.Outcome, d.Code = policy.Deny, events.CodeNoExecutor
		d.Reason = "no executor serves tool " + req.Tool
	}
	sum := &events.Summary{
		Fingerprint:    fingerprint,
		Agent:          req.Agent,
		Tool:           req.Tool,
		Class:          string(d.Class),
		ArgsDigest:     events.ArgsDigest(req.Args),
		IdempotencyKey: req.IdempotencyKey,
		RequestSeq:     reqSeq,
	}
	hdr := events.OpHeader{OpID: opID, Workspace: req.Workspace}
	if d.Outcome == policy.Allow {
		return events.TypeDecided, &events.Decided{OpHeader: hdr, Request: sum, PolicyHash: d.Hash, Reason: d.Reason}
	}
	return events.TypeDenied, &events.Denied{OpHeader: hdr, Request: sum, Code: d.Code, Reason: d.Reason, PolicyHash: d.Hash}
}

// existing answers a request whose op already exists: a retry, within the
// dedupe window or long after it. The op's newest event says where it
// stands. Nothing is appended: the op's own events carry it on.
func (g *Gate) existing(ctx context.Context, req *events.Request, opID string) (events.Reply, error) {
	last, err := oplog.Last(ctx, g.ops, req.Workspace, opID)
	if err != nil {
		return events.Reply{}, err
	}
	if r, ok := events.OutcomeReply(last.Data); ok {
		r.Existing = true
		return r, nil
	}
	return events.Reply{OpID: opID, Existing: true, State: events.StateAfter(last.Type)}, nil
}

// reject records a request.rejected event for a bad request.
func (g *Gate) reject(ctx context.Context, m jetstream.Msg, seq uint64, e *events.Error) error {
	ws := subjectWorkspace(m.Subject())
	rej := &events.Rejected{
		Code: e.Code, Message: e.Message, Subject: m.Subject(), RequestSeq: seq,
		RequestID: m.Headers().Get(events.HeaderPrefix + "id"),
		Size:      len(m.Data()), Digest: events.Digest(m.Data()),
	}
	ev, err := events.NewEvent(events.TypeRejected, Source, "", rej)
	if err != nil {
		return err
	}
	msg := events.Encode(events.RejectedSubject(ws), ev)
	// One rejection per request message, even when the request is redelivered.
	_, err = g.cfg.JetStream.PublishMsg(ctx, msg, jetstream.WithMsgID(fmt.Sprintf("rejected:%d", seq)))
	if err == nil {
		g.cfg.Logger.Info("request rejected", "ws", ws, "seq", seq, "code", e.Code, "err", e.Message)
	}
	return err
}

// reply answers an Airlock-Reply-To inbox, if there is one.
func (g *Gate) reply(inbox string, r events.Reply) {
	if inbox == "" {
		return
	}
	body, _ := events.MarshalJSON(r)
	if err := g.cfg.Conn.Publish(inbox, body); err != nil {
		g.cfg.Logger.Debug("reply", "subject", inbox, "err", err)
	}
}

// replyTo is the request's Airlock-Reply-To inbox, or "" when it has no
// valid one.
func replyTo(m jetstream.Msg) string {
	if inbox := m.Headers().Get(events.HeaderReplyTo); events.ValidInbox(inbox) {
		return inbox
	}
	return ""
}
