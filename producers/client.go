package producers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/jspub"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/seal"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Defaults of a Client.
const (
	DefaultWait = 30 * time.Second
	// DefaultPublishTries, 100 ms apart and doubling to 2 s, outlast a
	// cluster's election of a new stream leader (about 7 s in all).
	DefaultPublishTries = 8
	DefaultPollInterval = 2 * time.Second
	// DefaultPublishTimeout bounds one try of a publish: an
	// acknowledgement lost with a connection is retried (same
	// Nats-Msg-Id) once it is back.
	DefaultPublishTimeout = 5 * time.Second
	DefaultSource         = "airlock/producers"
)

// Option configures a Client.
type Option func(*Client) error

// WithWait bounds how long Submit waits for a terminal outcome when ctx has
// no earlier deadline; after it Submit returns a pending outcome.
func WithWait(d time.Duration) Option {
	return func(c *Client) error {
		if d <= 0 {
			return fmt.Errorf("producers: wait %s must be positive", d)
		}
		c.wait = d
		return nil
	}
}

// WithPublishTries sets how often a request is published before Submit
// gives up on the transport; every try reuses the fingerprint as
// Nats-Msg-Id.
func WithPublishTries(n int) Option {
	return func(c *Client) error {
		if n < 1 || n > 100 {
			return fmt.Errorf("producers: publish tries %d outside 1..100", n)
		}
		c.tries = n
		return nil
	}
}

// WithPublishTimeout bounds how long one try of a publish waits for
// JetStream's acknowledgement; default DefaultPublishTimeout. When every
// try goes unacknowledged Submit returns a pending outcome: the request
// may be stored, and then it runs.
func WithPublishTimeout(d time.Duration) Option {
	return func(c *Client) error {
		if d <= 0 {
			return fmt.Errorf("producers: publish timeout %s must be positive", d)
		}
		c.pubTimeout = d
		return nil
	}
}

// WithSource sets the ce-source of submitted requests.
func WithSource(src string) Option {
	return func(c *Client) error {
		if src == "" {
			return errors.New("producers: empty source")
		}
		c.source = src
		return nil
	}
}

// WithPollInterval sets how often a waiting Submit reads the op's newest
// event itself, in case a reply was missed.
func WithPollInterval(d time.Duration) Option {
	return func(c *Client) error {
		if d < 10*time.Millisecond {
			return fmt.Errorf("producers: poll interval %s below 10ms", d)
		}
		c.poll = d
		return nil
	}
}

// WithAgentKey gives the client the seed ("SU...", as in the agent's
// creds file) of the agent it submits as: a result Airlock kept for that
// agent is sealed to it, and only it opens it. Without it a Submit that
// learns of a completion from a retry or a lost reply returns the digest
// alone, with ResultCode NO_CREDENTIAL. (With serve's --no-auth, Airlock
// opens results itself and no key is needed.)
func WithAgentKey(seed []byte) Option {
	return func(c *Client) error {
		priv, err := seal.PrivateKey(seed)
		if err != nil {
			return fmt.Errorf("producers: agent key: %w", err)
		}
		c.opener = seal.NewOpener(priv)
		return nil
	}
}

// WithWaitThroughHolds makes Submit wait on when its op is held, through
// an approver's grant, for the op's outcome (and result), until the wait
// runs out; a wait that runs out while the op is still held returns the
// held outcome (Code APPROVAL_REQUIRED) with Pending set.
func WithWaitThroughHolds() Option {
	return func(c *Client) error {
		c.throughHolds = true
		return nil
	}
}

// Client submits requests and queries ops over one NATS connection, which
// the caller owns.
type Client struct {
	pub          *jspub.Publisher // the client's own, closed by Close
	opener       *seal.Opener     // the agent's key, for sealed results
	throughHolds bool

	nc    *nats.Conn
	js    jetstream.JetStream
	wait  time.Duration
	tries int
	// pubTimeout bounds one try of a publish.
	pubTimeout time.Duration
	poll       time.Duration
	source     string
	token      string // this client's token in its reply subjects

	mu      sync.Mutex
	stream  jetstream.Stream
	closed  bool
	replies map[string]*nats.Subscription // by agent
	waiters map[string]map[*waiter]struct{}
	kept    replyCache // terminal replies no Submit waited for (kept.go)
}

// New returns a client on nc.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	c := &Client{
		nc: nc, wait: DefaultWait, tries: DefaultPublishTries, pubTimeout: DefaultPublishTimeout, poll: DefaultPollInterval,
		source: DefaultSource, waiters: map[string]map[*waiter]struct{}{},
		replies: map[string]*nats.Subscription{}, token: nuid.Next(),
	}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	if nc == nil {
		return nil, errors.New("producers: nil connection")
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	c.js = js
	if c.pub, err = jspub.New(nc); err != nil {
		return nil, err
	}
	return c, nil
}

// inbox returns the reply subject prefix of agent's requests,
// airlock.v1.reply.<agent>.<token>, subscribing to it on first use: the
// server lets only the agent's own credential subscribe there.
func (c *Client) inbox(agent string) (string, error) {
	prefix := events.ReplyPrefix(agent) + c.token
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return "", errors.New("producers: client closed")
	}
	if _, ok := c.replies[agent]; ok {
		return prefix, nil
	}
	sub, err := c.nc.Subscribe(prefix+".*", c.onReply)
	if err != nil {
		return "", err
	}
	// Make sure the server routes replies here before any request leaves.
	if err := c.nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return "", err
	}
	c.replies[agent] = sub
	return prefix, nil
}

// Close removes the client's subscriptions. It does not close the
// connection. Submits in flight return pending outcomes.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	err := c.pub.Close()
	for agent, sub := range c.replies {
		err = errors.Join(err, sub.Unsubscribe())
		delete(c.replies, agent)
	}
	return err
}

// Outcome is where a submitted op stands when Submit returns.
type Outcome struct {
	OpID  string       `json:"op_id"`
	State events.State `json:"state"`
	// Pending is true when the wait ran out before a terminal state.
	Pending bool `json:"pending,omitempty"`
	// Result is a completed op's result, checked against ResultDigest,
	// the digest the op's completed event recorded: from the reply of the
	// runner that ran it, or, on a retry or after a lost reply, the
	// result Airlock kept sealed to the agent for the op's retention
	// (ADR 0018). A result that is empty is the JSON null, never a
	// missing Result. A completed outcome without Result has ResultCode
	// and ResultError to say why (RESULT_EXPIRED, RESULT_NOT_KEPT, ...).
	Result json.RawMessage `json:"result,omitempty"`
	// ResultDigest (sha256: of the compacted result) and ResultBytes (its
	// size in bytes) describe a completed op's result, kept or not.
	ResultDigest string `json:"result_digest,omitempty"`
	ResultBytes  int    `json:"result_bytes,omitempty"`
	// ResultKeptUntil is when Airlock erases the kept result.
	ResultKeptUntil *time.Time  `json:"result_kept_until,omitempty"`
	ResultCode      events.Code `json:"result_code,omitempty"`
	ResultError     string      `json:"result_error,omitempty"`

	sealed          []byte
	eraseOnDelivery bool
	erased          string
	// Code and Message explain a denied, failed, expired or ambiguous op,
	// and a held one (APPROVAL_REQUIRED).
	Code    events.Code `json:"error_code,omitempty"`
	Message string      `json:"error,omitempty"`
	// HoldID, ArgsDigest and HoldExpiresAt describe the hold of a held op:
	// an approver grants it by naming the hold and the digest.
	HoldID        string     `json:"hold_id,omitempty"`
	ArgsDigest    string     `json:"args_digest,omitempty"`
	HoldExpiresAt *time.Time `json:"hold_expires_at,omitempty"`
}

// Terminal reports whether the outcome is final.
func (o Outcome) Terminal() bool { return o.State.Terminal() }

// Held reports whether the op waits for an approver.
func (o Outcome) Held() bool { return o.State == events.StateHeld }

// Submit publishes req and waits for the op's terminal outcome, or until
// the op is held for an approver: a held outcome has Code
// APPROVAL_REQUIRED and the hold's id and digest. Submitting the same
// request again later (after a grant, say) waits for where it went. It returns
// an *events.Error for a request that is bad input (checked locally first,
// or rejected by the gate) and a pending outcome, with a nil error, when
// the wait (WithWait or ctx's deadline) runs out first.
func (c *Client) Submit(ctx context.Context, req events.Request) (Outcome, error) {
	if err := ctx.Err(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return Outcome{}, err
	}
	if err := req.Validate(); err != nil {
		return Outcome{}, err
	}
	body, err := events.MarshalJSON(req)
	if err != nil {
		return Outcome{}, err
	}
	if len(body) > events.MaxRequestBytes {
		return Outcome{}, events.Errorf(events.CodeRequestTooLarge, "request body is %d bytes, limit %d", len(body), events.MaxRequestBytes)
	}
	fp, opID := req.Identity()
	inbox, err := c.inbox(req.Agent)
	if err != nil {
		return Outcome{}, &events.Error{Code: events.CodeUnavailable, Message: "subscribe to replies: " + err.Error(), Retryable: true}
	}
	w := c.watch(opID)
	defer c.unwatch(opID, w)

	wctx, cancel := context.WithTimeout(ctx, c.wait)
	defer cancel()
	msg := events.NewMessage(events.RequestSubject(req.Workspace, req.Agent), events.TypeRequested, c.source, opID, fp, body)
	msg.Header.Set(events.HeaderReplyTo, inbox+"."+opID)
	dup, err := c.publish(wctx, msg, fp)
	if err != nil {
		switch {
		case ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded):
			return Outcome{}, ctx.Err()
		case wctx.Err() != nil, errors.Is(err, errUnacknowledged):
			// The request may be stored, and then it runs: pending.
			return Outcome{OpID: opID, Pending: true}, nil
		}
		return Outcome{}, err
	}
	if dup {
		w.poke()
	}
	out, err := c.await(ctx, wctx, w, req.Workspace, opID)
	if err != nil || out.State != events.StateCompleted {
		return out, err
	}
	return c.withResult(context.WithoutCancel(ctx), req.Agent, out)
}

// publish sends the request, retrying transport failures with the same
// Nats-Msg-Id. It reports whether JetStream saw a duplicate.
func (c *Client) publish(ctx context.Context, msg *nats.Msg, fp string) (bool, error) {
	var err error
	for try := range c.tries {
		if try > 0 {
			select {
			case <-time.After(min(time.Duration(1<<min(try, 6))*50*time.Millisecond, 2*time.Second)):
			case <-ctx.Done():
				return false, ctx.Err()
			}
		}
		var dup bool
		if dup, err = c.publishOnce(ctx, msg, fp); err == nil {
			return dup, nil
		}
		if !retryable(err) || ctx.Err() != nil {
			break
		}
	}
	if errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrDisconnected) {
		return false, errUnacknowledged
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum {
		return false, events.Errorf(events.CodeRequestTooLarge, "%v", err)
	}
	if errors.Is(err, nats.ErrMaxPayload) {
		return false, events.Errorf(events.CodeRequestTooLarge, "%v", err)
	}
	return false, &events.Error{Code: events.CodeUnavailable, Message: "publish request: " + err.Error(), Retryable: true}
}

// errUnacknowledged is publish's answer when every try went
// unacknowledged: JetStream may have stored the request.
var errUnacknowledged = errors.New("request not acknowledged")

// publishOnce publishes msg with Nats-Msg-Id fp and waits for JetStream's
// acknowledgement, at most the client's publish timeout.
func (c *Client) publishOnce(ctx context.Context, msg *nats.Msg, fp string) (bool, error) {
	pub := c.pub
	msg.Header[jetstream.MsgIDHeader] = []string{fp}
	ack, err := pub.Publish(msg)
	if err != nil {
		return false, err
	}
	_, dup, err := ack.WaitAtMost(ctx, c.pubTimeout)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		err = nats.ErrTimeout
	}
	return dup, err
}

func retryable(err error) bool {
	return errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected)
}

// ResultGrace is how long Submit waits for the runner's reply, which
// carries the result, once it knows from elsewhere (its own read of the
// op, a reply without the result) that the op completed; after it, Submit
// fetches the result Airlock kept (Result). An op that completed more
// than 100 ms before the Submit began (a retry, after a grant, of an op
// that ran) is not waited for: its reply went to the wait of that moment.
const ResultGrace = 500 * time.Millisecond

// replyMargin is how long before a wait began an op must have completed
// for the wait to expect no reply from its runner: the reply is sent as
// the outcome is stored, within milliseconds; the margin also covers a
// server clock that far behind the client's.
const replyMargin = 100 * time.Millisecond

// await waits for a terminal event, a reply, or the end of the wait. Its
// reads of the op (refresh) run beside the wait, one at a time: a read
// that a cluster electing a leader holds up for seconds must not keep a
// reply that has come meanwhile from ending the wait.
func (c *Client) await(ctx, wctx context.Context, w *waiter, ws, opID string) (Outcome, error) {
	ticker := time.NewTicker(c.poll)
	defer ticker.Stop()
	var grace <-chan time.Time
	var reading <-chan struct{} // closed when the read in flight ends; nil when none
	again := false              // a poke or a tick came during the read in flight
	read := func() {
		if reading != nil {
			again = true
			return
		}
		ch := make(chan struct{})
		reading = ch
		go func() {
			defer close(ch)
			c.refresh(wctx, w, ws, opID)
		}()
	}
	for {
		if o, err, done := w.result(); done {
			return o, err
		}
		select {
		case <-w.completed:
			if grace == nil {
				grace = time.After(ResultGrace)
			}
		case <-grace:
			w.settleUnresulted()
		case <-w.done:
		case <-reading:
			reading = nil
			if again {
				again = false
				read()
			}
		case <-w.poked:
			read()
		case <-ticker.C:
			read()
		case <-wctx.Done():
			if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return Outcome{}, ctx.Err()
			}
			// One last look, so a pending outcome says where the op stands.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			c.refresh(rctx, w, ws, opID)
			cancel()
			w.settleUnresulted()
			o, err, done := w.result()
			if done {
				return o, err
			}
			o.Pending = true
			return o, nil
		}
	}
}

// refresh reads the op's newest event from the stream, within
// refreshTimeout.
func (c *Client) refresh(ctx context.Context, w *waiter, ws, opID string) {
	ctx, cancel := context.WithTimeout(ctx, refreshTimeout)
	defer cancel()
	st, err := c.eventsStream(ctx)
	if err != nil {
		return
	}
	last, err := oplog.Last(ctx, st, ws, opID)
	if errors.Is(err, oplog.ErrEmpty) {
		// Not stored yet, or ended and gone to the archive (ADR 0026):
		// the projection has it then.
		if op, err := c.Op(ctx, opID); err == nil && op.State.Terminal() {
			w.op(op)
		}
		return
	}
	if err != nil {
		return
	}
	if last.Type != events.TypeScrubbed {
		w.event(last.Type, last.Data)
		// Completed well before this wait began: the runner's reply, sent
		// as it stored the outcome, went to the wait of that moment (a
		// retry within the duplicates window is not delivered to the
		// gate, which would answer it). None is coming here: fetch the
		// kept result now rather than after ResultGrace. replyMargin
		// leaves a reply in flight, and a server clock up to that much
		// behind this one, their grace.
		if last.Time.Before(w.since.Add(-replyMargin)) {
			w.settleUnresulted()
		}
		return
	}
	// The terminal event came before the scrub: the projection has it.
	if op, err := c.Op(ctx, opID); err == nil {
		w.op(op)
	}
}

// eventsStream is the ops stream's handle, looked up once. The lookup is a
// JetStream API request, made without the client's lock (a cluster
// electing a leader can leave it unanswered for seconds, and every other
// Submit needs the lock) and bounded by streamLookupTimeout.
func (c *Client) eventsStream(ctx context.Context) (jetstream.Stream, error) {
	c.mu.Lock()
	st := c.stream
	c.mu.Unlock()
	if st != nil {
		return st, nil
	}
	lctx, cancel := context.WithTimeout(ctx, streamLookupTimeout)
	defer cancel()
	st, err := c.js.Stream(lctx, streams.Ops)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stream == nil {
		c.stream = st
	}
	return c.stream, nil
}

// streamLookupTimeout bounds one lookup of the ops stream; a wait polls
// again at its next tick.
const streamLookupTimeout = 5 * time.Second

// refreshTimeout bounds one read of an op by a waiting Submit (the ops
// stream's lookup, its newest event, the projection): a read left
// unanswered ends, and the next tick reads again, rather than holding the
// wait's reads until the wait's deadline.
const refreshTimeout = 2 * streamLookupTimeout

// watch registers a waiter for op's replies.
func (c *Client) watch(opID string) *waiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := newWaiter(opID, c.throughHolds)
	if c.waiters[opID] == nil {
		c.waiters[opID] = map[*waiter]struct{}{}
	}
	c.waiters[opID][w] = struct{}{}
	if r, ok := c.kept.take(opID, w.since); ok {
		// The op ended, and its reply came, before this wait began.
		w.reply(r)
	}
	return w
}

func (c *Client) unwatch(opID string, w *waiter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.waiters[opID], w)
	if len(c.waiters[opID]) == 0 {
		delete(c.waiters, opID)
	}
}

// onReply dispatches a reply, from the gate or an executor, to the op's
// waiters.
func (c *Client) onReply(m *nats.Msg) {
	opID := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	var r events.Reply
	if err := events.UnmarshalJSON(m.Data, &r); err != nil {
		return
	}
	c.mu.Lock()
	ws := make([]*waiter, 0, len(c.waiters[opID]))
	for w := range c.waiters[opID] {
		ws = append(ws, w)
	}
	if len(ws) == 0 && r.OpID == opID && r.State.Terminal() {
		c.kept.put(opID, r, len(m.Data), time.Now())
	}
	c.mu.Unlock()
	for _, w := range ws {
		w.reply(r)
	}
}
