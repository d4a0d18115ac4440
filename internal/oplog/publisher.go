package oplog

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// publisher publishes messages to JetStream with a reply subject of its own
// and matches each acknowledgement to its message: the asynchronous publish
// of the jetstream package, without what Airlock does not use (stalling,
// retries on no responders, callbacks) and with the common acknowledgement,
// {"stream":"AIRLOCK_OPS","seq":N}, read without encoding/json. Decoding
// every acknowledgement with encoding/json under the jetstream package's
// publisher lock was about 3% of the pipeline's CPU.
//
// There is one per connection. Acknowledgements arrive on
// <inbox>.<n> and are handled one at a time on the subscription's
// goroutine; the number in flight is bounded by the callers' batches.
type publisher struct {
	nc     *nats.Conn
	prefix string // <inbox>.
	sub    *nats.Subscription

	mu      sync.Mutex
	next    uint64
	waiting map[uint64]*ack
}

// ack is the answer to one publish, set once before done is closed.
type ack struct {
	done chan struct{}
	seq  uint64
	err  error
}

var publishers sync.Map // *nats.Conn -> *publisher

// publisherFor returns the connection's publisher, subscribing its inbox
// the first time. Publishers of closed connections are dropped then.
func publisherFor(nc *nats.Conn) (*publisher, error) {
	if p, ok := publishers.Load(nc); ok {
		return p.(*publisher), nil
	}
	publishers.Range(func(k, _ any) bool {
		if k.(*nats.Conn).IsClosed() {
			publishers.Delete(k)
		}
		return true
	})
	p := &publisher{nc: nc, prefix: nc.NewInbox() + ".", waiting: make(map[uint64]*ack)}
	sub, err := nc.Subscribe(p.prefix+"*", p.onAck)
	if err != nil {
		return nil, err
	}
	p.sub = sub
	if prev, loaded := publishers.LoadOrStore(nc, p); loaded {
		_ = sub.Unsubscribe() // another goroutine's won
		return prev.(*publisher), nil
	}
	return p, nil
}

// publish sends m with a reply subject of the publisher's and returns the
// ack to wait on. An error means m was not sent.
func (p *publisher) publish(m *nats.Msg) (*ack, error) {
	a := &ack{done: make(chan struct{})}
	p.mu.Lock()
	p.next++
	id := p.next
	p.waiting[id] = a
	p.mu.Unlock()
	m.Reply = p.prefix + strconv.FormatUint(id, 10)
	if err := p.nc.PublishMsg(m); err != nil {
		p.forget(m.Reply)
		return nil, err
	}
	return a, nil
}

// forget stops waiting for the ack of the message published with reply
// subject reply: Wait gave up on it.
func (p *publisher) forget(reply string) {
	id, err := strconv.ParseUint(reply[len(p.prefix):], 10, 64)
	if err != nil {
		return
	}
	p.mu.Lock()
	delete(p.waiting, id)
	p.mu.Unlock()
}

func (p *publisher) onAck(m *nats.Msg) {
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
	a.seq, a.err = parseAck(m)
	close(a.done)
}

// parseAck reads JetStream's answer to a publish: the stored sequence, or
// the API error, or jetstream.ErrNoStreamResponse when no stream took the
// subject (a 503 status: JetStream is down or the stream is gone).
func parseAck(m *nats.Msg) (uint64, error) {
	if len(m.Data) == 0 {
		if m.Header.Get("Status") == "503" {
			return 0, jetstream.ErrNoStreamResponse
		}
		return 0, jetstream.ErrInvalidJSAck
	}
	if seq, ok := fastAck(m.Data); ok {
		return seq, nil
	}
	var r struct {
		Error  *jetstream.APIError `json:"error"`
		Stream string              `json:"stream"`
		Seq    uint64              `json:"seq"`
	}
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return 0, jetstream.ErrInvalidJSAck
	}
	if r.Error != nil {
		return 0, r.Error
	}
	if r.Stream == "" {
		return 0, jetstream.ErrInvalidJSAck
	}
	return r.Seq, nil
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

// errNoPublisher wraps a failure to subscribe the publisher's inbox.
var errNoPublisher = errors.New("oplog: cannot subscribe for acknowledgements")
