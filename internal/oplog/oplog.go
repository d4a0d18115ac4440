package oplog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/jspub"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// ErrConflict means the op subject's last sequence was not the expected one:
// another writer's transition won. Read the op again and decide.
var ErrConflict = errors.New("oplog: compare-and-swap lost")

// ErrEmpty means the subject holds no event: the op does not exist.
var ErrEmpty = errors.New("oplog: no event on subject")

// Event is an op event read back from the stream.
type Event struct {
	Type events.Type
	ID   string // ce-id
	Seq  uint64 // stream sequence
	Data any    // the *T of events.DecodeData
	// Subject is the subject it was appended on.
	Subject string
	// Header is the stored message's header.
	Header nats.Header
	// Time is when the stream stored it.
	Time time.Time
}

// Op names the op an event belongs to; with the event's type it makes the
// subject.
type Op struct {
	Workspace string
	ID        string
	Tool      string
}

// Option adjusts the message of an append.
type Option func(*nats.Msg)

// ReplyTo carries the request's Airlock-Reply-To inbox on the event, for the
// executor that will answer it. Empty inboxes are left out.
func ReplyTo(inbox string) Option {
	return func(m *nats.Msg) {
		if inbox != "" {
			m.Header.Set(events.HeaderReplyTo, inbox)
		}
	}
}

// Restates marks the event as the archived outcome event at seq stated
// again (events.HeaderRestates, ADR 0026).
func Restates(seq uint64) Option {
	return func(m *nats.Msg) { m.Header.Set(events.HeaderRestates, strconv.FormatUint(seq, 10)) }
}

// Pending is one append in flight.
type Pending struct {
	js      jetstream.JetStream
	subject string
	filter  string
	expect  uint64
	typ     events.Type
	msg     *nats.Msg
	data    any
	id      string
	ack     *jspub.Ack
	err     error
}

// Writer appends op events on one connection, with a publisher of its
// own. Each part of a process that writes owns one (NewWriter) and closes
// it when it stops.
type Writer struct {
	js  jetstream.JetStream
	pub *jspub.Publisher
}

// NewWriter returns a writer on js's connection.
func NewWriter(js jetstream.JetStream) (*Writer, error) {
	pub, err := jspub.New(js.Conn())
	if err != nil {
		return nil, fmt.Errorf("oplog: subscribe for acknowledgements: %w", err)
	}
	return &Writer{js: js, pub: pub}, nil
}

// Close stops the writer: appends still waiting fail.
func (w *Writer) Close() error { return w.pub.Close() }

// JetStream is the writer's JetStream context.
func (w *Writer) JetStream() jetstream.JetStream { return w.js }

// Start publishes one transition of type t of op, expecting the op's last
// stream sequence to be expect (0 for a new op), and returns without
// waiting for the server.
func (w *Writer) Start(op Op, expect uint64, t events.Type, source string, data any, opts ...Option) *Pending {
	js := w.js
	p := &Pending{
		js: js, subject: events.OpEventSubject(op.Workspace, op.ID, op.Tool, t),
		filter: events.OpFilter(op.Workspace, op.ID), expect: expect, typ: t, data: data,
	}
	body, err := events.MarshalJSON(data)
	if err != nil {
		p.err = fmt.Errorf("marshal %s: %w", t.Short(), err)
		return p
	}
	p.id = nuid.Next()
	p.msg = events.NewMessage(p.subject, t, source, op.ID, p.id, body)
	for _, o := range opts {
		o(p.msg)
	}
	p.msg.Header[jetstream.ExpectedLastSubjSeqHeader] = []string{strconv.FormatUint(expect, 10)}
	p.msg.Header[jetstream.ExpectedLastSubjSeqSubjHeader] = []string{p.filter}
	p.ack, p.err = w.pub.Publish(p.msg)
	return p
}

func (p *Pending) cas() jetstream.PublishOpt {
	return jetstream.WithExpectLastSequenceForSubject(p.expect, p.filter)
}

// Data is the event data the append carries.
func (p *Pending) Data() any { return p.data }

// Wait returns the appended event's stream sequence, or an error wrapping
// ErrConflict when the compare-and-swap lost.
//
// When the outcome is unknown (no answer before ctx ends or the publish
// timed out after the server may have stored it), Wait reads the subject
// back: its own event there means success; the subject unmoved means it is
// safe to publish once more, which it does, synchronously.
func (p *Pending) Wait(ctx context.Context, stream jetstream.Stream) (uint64, error) {
	err := p.err
	if err == nil {
		// An acknowledgement lost with a node that died holding the
		// publish never comes, and the connection, to another node, does
		// not drop: the wait is bounded, and then resolved by reading.
		var seq uint64
		seq, _, err = p.ack.WaitAtMost(ctx, AckTimeout)
		if err == nil {
			return seq, nil
		}
	}
	if IsConflict(err) {
		return 0, fmt.Errorf("%w: %s expected %d: %v", ErrConflict, p.subject, p.expect, err)
	}
	if p.msg == nil || !unknownOutcome(err) {
		return 0, fmt.Errorf("append %s to %s: %w", p.typ.Short(), p.subject, err)
	}
	rctx := ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), resolveTimeout)
		defer cancel()
	}
	last, lerr := lastMatching(rctx, stream, p.filter)
	switch {
	case lerr == nil && last.ID == p.id:
		return last.Seq, nil // it landed
	case errors.Is(lerr, ErrEmpty) && p.expect == 0, lerr == nil && last.Seq == p.expect:
		ack, perr := p.js.PublishMsg(rctx, p.msg, p.cas())
		if perr == nil {
			return ack.Sequence, nil
		}
		if IsConflict(perr) {
			// The first copy may have landed after the read: it is the
			// one thing that can beat an append of the same expectation
			// other than another writer, and its ce-id tells.
			if again, err := lastMatching(rctx, stream, p.filter); err == nil && again.ID == p.id {
				return again.Seq, nil
			}
			return 0, fmt.Errorf("%w: %s expected %d: %v", ErrConflict, p.subject, p.expect, perr)
		}
		return 0, fmt.Errorf("append %s to %s: outcome unknown: %w", p.typ.Short(), p.subject, perr)
	case lerr == nil:
		return 0, fmt.Errorf("%w: %s moved to %d while publishing", ErrConflict, p.subject, last.Seq)
	default:
		return 0, fmt.Errorf("append %s to %s: outcome unknown: %w", p.typ.Short(), p.subject, errors.Join(err, lerr))
	}
}

// resolveTimeout bounds the read-back of an append whose outcome is unknown.
const resolveTimeout = 5 * time.Second

// AckTimeout bounds the wait for an append's acknowledgement; past it the
// append's outcome is read back from the stream.
const AckTimeout = 5 * time.Second

func unknownOutcome(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, jetstream.ErrAsyncPublishTimeout) || errors.Is(err, nats.ErrConnectionClosed) ||
		errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrNoResponders)
}

// Append is Start and Wait.
func (w *Writer) Append(ctx context.Context, stream jetstream.Stream, op Op, expect uint64, t events.Type, source string, data any, opts ...Option) (uint64, error) {
	return w.Start(op, expect, t, source, data, opts...).Wait(ctx, stream)
}

// IsConflict reports whether err is JetStream's wrong-last-sequence error.
func IsConflict(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return errors.Is(err, ErrConflict)
}

// Last returns the newest event of an op, or ErrEmpty.
func Last(ctx context.Context, stream jetstream.Stream, ws, op string) (*Event, error) {
	return lastMatching(ctx, stream, events.OpFilter(ws, op))
}

// First returns the first event of an op, the one that carries its
// request summary, or ErrEmpty.
func First(ctx context.Context, stream jetstream.Stream, ws, op string) (*Event, error) {
	filter := events.OpFilter(ws, op)
	raw, err := stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(filter))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, ErrEmpty
	}
	if err != nil {
		return nil, fmt.Errorf("first event on %s: %w", filter, err)
	}
	return Decode(raw)
}

// LastOf returns the op's newest event of type t, or an error wrapping
// ErrEmpty when it has none.
func LastOf(ctx context.Context, stream jetstream.Stream, op Op, t events.Type) (*Event, error) {
	return lastMatching(ctx, stream, events.OpEventSubject(op.Workspace, op.ID, op.Tool, t))
}

func lastMatching(ctx context.Context, stream jetstream.Stream, filter string) (*Event, error) {
	raw, err := stream.GetLastMsgForSubject(ctx, filter)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, ErrEmpty
	}
	if err != nil {
		return nil, fmt.Errorf("last event on %s: %w", filter, err)
	}
	return Decode(raw)
}

// Decode decodes a stored op event.
func Decode(raw *jetstream.RawStreamMsg) (*Event, error) {
	t, id, data, err := events.DecodeStored(raw.Header, raw.Data)
	if err != nil {
		return nil, fmt.Errorf("event %d on %s: %w", raw.Sequence, raw.Subject, err)
	}
	return &Event{Type: t, ID: id, Seq: raw.Sequence, Data: data, Header: raw.Header, Subject: raw.Subject, Time: raw.Time}, nil
}
