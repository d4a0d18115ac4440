package gate

import (
	"context"
	"encoding/json"
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
	// Workers is how many requests are handled at once; default 32.
	Workers int
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
	if c.Workers <= 0 {
		c.Workers = 32
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
	cfg    Config
	events jetstream.Stream
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
	st, err := js.Stream(ctx, streams.Events)
	if err != nil {
		return fmt.Errorf("gate: %w", err)
	}
	g.events = st
	cons, err := js.CreateOrUpdateConsumer(ctx, streams.Events, jetstream.ConsumerConfig{
		Durable:       streams.GateConsumer,
		Description:   "Airlock gate: requests to ops",
		FilterSubject: events.RequestSubjects,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       g.cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: 8 * g.cfg.Workers,
	})
	if err != nil {
		return fmt.Errorf("gate: consumer: %w", err)
	}
	return pull.Work(ctx, cons, g.cfg.Workers, g.handle)
}

// handle settles one request message: it returns after acking or naking it.
func (g *Gate) handle(ctx context.Context, m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		g.cfg.Logger.Error("request metadata", "err", err)
		_ = m.Term()
		return
	}
	reply := m.Headers().Get(events.HeaderReplyTo)
	req, rerr := g.parse(m)
	if rerr != nil {
		if err := g.reject(ctx, m, md.Sequence.Stream, rerr); err != nil {
			g.retry(m, "reject", err)
			return
		}
		g.reply(reply, events.Reply{Code: rerr.Code, Message: rerr.Message})
		_ = m.Ack()
		return
	}
	r, err := g.admit(ctx, req, md.Sequence.Stream)
	if err != nil {
		g.retry(m, "admit "+events.OpID(req.Fingerprint()), err)
		return
	}
	g.reply(reply, r)
	_ = m.Ack()
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

// admit creates the op for a valid request, or finds the op a previous copy
// of the request created, and makes sure a ready op has a work item.
func (g *Gate) admit(ctx context.Context, req *events.Request, reqSeq uint64) (events.Reply, error) {
	fp := req.Fingerprint()
	opID := events.OpID(fp)
	subject := events.OpSubject(req.Workspace, opID)
	d := g.cfg.Policy.Decide(req)
	sum := &events.Summary{
		Fingerprint:    req.FingerprintHex(),
		Agent:          req.Agent,
		Tool:           req.Tool,
		Class:          string(d.Class),
		ArgsDigest:     events.ArgsDigest(req.Args),
		IdempotencyKey: req.IdempotencyKey,
		RequestSeq:     reqSeq,
	}
	hdr := events.OpHeader{OpID: opID, Workspace: req.Workspace}
	var typ events.Type
	var data any
	state := events.StateReady
	if d.Outcome == policy.Allow {
		typ, data = events.TypeDecided, &events.Decided{OpHeader: hdr, Request: sum, PolicyHash: d.Hash, Reason: d.Reason}
	} else {
		typ, data = events.TypeDenied, &events.Denied{OpHeader: hdr, Request: sum, Code: d.Code, Reason: d.Reason, PolicyHash: d.Hash}
		state = events.StateDenied
	}
	seq, err := oplog.Append(ctx, g.cfg.JetStream, g.events, subject, 0, typ, Source, opID, data)
	if errors.Is(err, oplog.ErrConflict) {
		return g.existing(ctx, req, reqSeq, subject, opID)
	}
	if err != nil {
		return events.Reply{}, err
	}
	if state == events.StateReady {
		if err := g.publishWork(ctx, req, opID, reqSeq, seq); err != nil {
			return events.Reply{}, err
		}
	}
	g.cfg.Logger.Debug("op admitted", "op", opID, "ws", req.Workspace, "event_type", typ, "seq", seq)
	return events.Reply{OpID: opID, State: state, Code: deniedCode(data)}, nil
}

func deniedCode(data any) events.Code {
	if d, ok := data.(*events.Denied); ok {
		return d.Code
	}
	return ""
}

// existing handles a request whose op already exists. The op's newest
// event says where it stands; a ready op gets its work item again (the
// claim's compare-and-swap makes a duplicate harmless), which also repairs
// a crash between the decision and the work item.
func (g *Gate) existing(ctx context.Context, req *events.Request, reqSeq uint64, subject, opID string) (events.Reply, error) {
	last, err := oplog.Last(ctx, g.events, subject)
	if err != nil {
		return events.Reply{}, err
	}
	r := events.Reply{OpID: opID, Existing: true}
	switch d := last.Data.(type) {
	case *events.Decided:
		r.State = events.StateReady
		ws := req.Workspace
		item := events.WorkItem{OpID: opID, Workspace: ws, Agent: req.Agent, Tool: req.Tool, ReadySeq: last.Seq}
		if d.Request != nil {
			item.RequestSeq = d.Request.RequestSeq
		}
		if item.RequestSeq == 0 {
			item.RequestSeq = reqSeq
		}
		if err := g.publishItem(ctx, item); err != nil {
			return events.Reply{}, err
		}
	case *events.Denied:
		r.State, r.Code = events.StateDenied, d.Code
	default:
		r.State = stateAfter(last.Type)
	}
	return r, nil
}

// stateAfter is the state an op is in after an event of type t, for replies.
func stateAfter(t events.Type) events.State {
	switch t {
	case events.TypeHeld:
		return events.StateHeld
	case events.TypeGranted:
		return events.StateGranted
	case events.TypeClaimed:
		return events.StateExecuting
	case events.TypeCompleted, events.TypeScrubbed:
		return events.StateCompleted
	case events.TypeFailed:
		return events.StateFailed
	case events.TypeExpired:
		return events.StateExpired
	case events.TypeAmbiguous:
		return events.StateAmbiguous
	}
	return events.StateReady
}

func (g *Gate) publishWork(ctx context.Context, req *events.Request, opID string, reqSeq, readySeq uint64) error {
	return g.publishItem(ctx, events.WorkItem{
		OpID: opID, Workspace: req.Workspace, Agent: req.Agent, Tool: req.Tool,
		RequestSeq: reqSeq, ReadySeq: readySeq,
	})
}

func (g *Gate) publishItem(ctx context.Context, item events.WorkItem) error {
	body, err := json.Marshal(item)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(events.WorkSubject(item.Workspace, item.Tool))
	msg.Header.Set(events.HeaderContentType, events.ContentTypeJSON)
	msg.Data = body
	_, err = g.cfg.JetStream.PublishMsg(ctx, msg, jetstream.WithMsgID(fmt.Sprintf("%s:%d", item.OpID, item.ReadySeq)))
	if err != nil {
		return fmt.Errorf("publish work item %s: %w", item.OpID, err)
	}
	return nil
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

// reply answers an Airlock-Reply-To inbox. Only inbox subjects are
// answered, so a request cannot make the gate publish anywhere else.
func (g *Gate) reply(inbox string, r events.Reply) {
	if !validInbox(inbox) {
		return
	}
	body, _ := json.Marshal(r)
	if err := g.cfg.Conn.Publish(inbox, body); err != nil {
		g.cfg.Logger.Debug("reply", "subject", inbox, "err", err)
	}
}

// validInbox accepts _INBOX.<tokens> without wildcards or white space.
func validInbox(s string) bool {
	const prefix = "_INBOX."
	if len(s) <= len(prefix) || len(s) > 256 || !strings.HasPrefix(s, prefix) {
		return false
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
			return false
		}
	}
	return true
}
