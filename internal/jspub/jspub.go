package jspub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Publisher publishes on one connection. Acknowledgements arrive on
// <inbox>.<n> and are handled one at a time on the subscription's
// goroutine; the number in flight is bounded by the callers. It is a
// value its owner makes (New) and closes, not a global: each part of a
// process that writes (the gate, a runner, the client) owns its own.
type Publisher struct {
	nc     *nats.Conn
	prefix string // <inbox>.
	sub    *nats.Subscription
	status chan nats.Status

	mu      sync.Mutex
	closed  bool
	next    uint64
	waiting map[uint64]*Ack
}

// Ack is the answer to one publish.
type Ack struct {
	p    *Publisher
	id   uint64 // its number in the reply subject and in waiting
	done chan struct{}
	// Set once before done is closed.
	seq uint64
	dup bool
	err error
}

// errClosed is Publish's error after Close.
var errClosed = errors.New("jspub: publisher closed")

// New returns a publisher on nc, subscribed to its own inbox. Close it
// when done; closing the connection ends it too.
func New(nc *nats.Conn) (*Publisher, error) {
	p := &Publisher{nc: nc, prefix: nc.NewInbox() + ".", waiting: make(map[uint64]*Ack)}
	sub, err := nc.Subscribe(p.prefix+"*", p.onAck)
	if err != nil {
		return nil, err
	}
	p.sub = sub
	p.status = nc.StatusChanged(nats.RECONNECTING, nats.CLOSED)
	go p.watch(p.status)
	if nc.IsClosed() { // closed before the listener was in place
		p.failAll(nats.ErrConnectionClosed)
	}
	return p, nil
}

// Close unsubscribes the publisher's inbox and fails what still waits for
// an acknowledgement (nats.ErrConnectionClosed). Publishing after it
// fails.
func (p *Publisher) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.sub.Unsubscribe()
	p.nc.RemoveStatusListener(p.status)
	p.failAll(nats.ErrConnectionClosed)
	return err
}

// watch fails the waiting acknowledgements when the connection drops, and
// ends when it closes.
func (p *Publisher) watch(status chan nats.Status) {
	for st := range status {
		if st == nats.CLOSED {
			p.failAll(nats.ErrConnectionClosed)
			return
		}
		p.failAll(nats.ErrDisconnected)
	}
}

// failAll ends every waiting acknowledgement with err.
func (p *Publisher) failAll(err error) {
	p.mu.Lock()
	waiting := p.waiting
	p.waiting = make(map[uint64]*Ack)
	p.mu.Unlock()
	for _, a := range waiting {
		a.err = err
		close(a.done)
	}
}

// Publish sends m with a reply subject of the publisher's (m.Reply is
// overwritten) and returns the ack to wait on. An error means m was not
// sent.
func (p *Publisher) Publish(m *nats.Msg) (*Ack, error) {
	a := &Ack{p: p, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errClosed
	}
	p.next++
	a.id = p.next
	p.waiting[a.id] = a
	p.mu.Unlock()
	m.Reply = p.prefix + strconv.FormatUint(a.id, 10)
	if err := p.nc.PublishMsg(m); err != nil {
		a.forget()
		return nil, err
	}
	return a, nil
}

// Wait returns the stored sequence and whether JetStream took the message
// for a duplicate of one it stored before. On an API error it returns a
// *jetstream.APIError, and jetstream.ErrNoStreamResponse when no stream
// took the subject. When ctx ends first, it returns ctx's error and the
// ack is forgotten: the message may or may not have been stored.
func (a *Ack) Wait(ctx context.Context) (seq uint64, duplicate bool, err error) {
	return a.wait(ctx, nil)
}

// WaitAtMost is Wait bounded by d as well as by ctx: when d passes first
// it returns context.DeadlineExceeded and forgets the ack, as Wait does
// for a context with that deadline. It costs one timer, and none for an
// acknowledgement already in, where a context.WithTimeout costs a
// context, its timer and its registration with ctx.
func (a *Ack) WaitAtMost(ctx context.Context, d time.Duration) (seq uint64, duplicate bool, err error) {
	select {
	case <-a.done:
		return a.seq, a.dup, a.err
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	return a.wait(ctx, t.C)
}

// wait waits for the acknowledgement, ctx, or expired (nil: never).
func (a *Ack) wait(ctx context.Context, expired <-chan time.Time) (uint64, bool, error) {
	select {
	case <-a.done:
		return a.seq, a.dup, a.err
	case <-ctx.Done():
		a.forget()
		return 0, false, ctx.Err()
	case <-expired:
		a.forget()
		return 0, false, context.DeadlineExceeded
	}
}

func (a *Ack) forget() {
	a.p.mu.Lock()
	delete(a.p.waiting, a.id)
	a.p.mu.Unlock()
}

// Waiting is how many acknowledgements the publisher waits for.
func (p *Publisher) Waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.waiting)
}

func (p *Publisher) onAck(m *nats.Msg) {
	id, err := strconv.ParseUint(m.Subject[len(p.prefix):], 10, 64)
	if err != nil {
		return
	}
	p.mu.Lock()
	a := p.waiting[id]
	delete(p.waiting, id)
	p.mu.Unlock()
	if a == nil {
		return // given up on, or not ours
	}
	a.seq, a.dup, a.err = parseAck(m)
	close(a.done)
}

// parseAck reads JetStream's answer to a publish: the stored sequence and
// whether it was a duplicate, or the API error, or
// jetstream.ErrNoStreamResponse when no stream took the subject (a 503
// status: JetStream is down or the stream is gone).
func parseAck(m *nats.Msg) (uint64, bool, error) {
	if len(m.Data) == 0 {
		if m.Header.Get("Status") == "503" {
			return 0, false, jetstream.ErrNoStreamResponse
		}
		return 0, false, jetstream.ErrInvalidJSAck
	}
	if seq, ok := fastAck(m.Data); ok {
		return seq, false, nil
	}
	var r struct {
		Error     *jetstream.APIError `json:"error"`
		Stream    string              `json:"stream"`
		Seq       uint64              `json:"seq"`
		Duplicate bool                `json:"duplicate"`
	}
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return 0, false, jetstream.ErrInvalidJSAck
	}
	if r.Error != nil {
		return 0, false, r.Error
	}
	if r.Stream == "" {
		return 0, false, jetstream.ErrInvalidJSAck
	}
	return r.Seq, r.Duplicate, nil
}

var (
	ackStart = []byte(`{"stream":"`)
	ackSeq   = []byte(`,"seq":`)
)

// fastAck reads an acknowledgement of exactly the form the server writes
// for a stored message, {"stream":"S","seq":N}, with a plain stream name.
// Anything else (a domain, a duplicate, an error) is left to
// encoding/json.
func fastAck(b []byte) (uint64, bool) {
	if !bytes.HasPrefix(b, ackStart) || !bytes.HasSuffix(b, []byte("}")) {
		return 0, false
	}
	rest := b[len(ackStart) : len(b)-1]
	end := bytes.IndexByte(rest, '"')
	if end <= 0 {
		return 0, false
	}
	for _, c := range rest[:end] {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return 0, false
		}
	}
	digits, ok := bytes.CutPrefix(rest[end+1:], ackSeq)
	if !ok || len(digits) == 0 || len(digits) > 20 || digits[0] == '0' {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	seq, err := strconv.ParseUint(string(digits), 10, 64)
	return seq, err == nil
}
