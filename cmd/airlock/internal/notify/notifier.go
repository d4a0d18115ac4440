package notify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// Notifier announces holds on their workspaces' webhooks. Run it once.
type Notifier struct {
	cfg   Config
	m     *metrics
	own   bool // cfg.Client is the notifier's own
	ready chan struct{}
}

// New returns a notifier; its metrics are registered on cfg.Registerer
// when set.
func New(cfg Config) (*Notifier, error) {
	own := cfg.Client == nil
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Notifier{cfg: cfg, m: m, own: own, ready: make(chan struct{})}, nil
}

// Ready is closed once Run has its consumer: every hold appended after
// that is announced.
func (n *Notifier) Ready() <-chan struct{} { return n.ready }

// consumerConfig is the durable consumer every notifier shares. A message
// is acked when its delivery ends, not on receipt (see the package doc):
// an early ack would lose the hold's notification with the process. Nor
// is AckWait as long as the whole retry budget (minutes, with
// Retry-After): the message in hand is marked in progress every AckWait/3
// instead, so that a hold left by a process that died is delivered again
// after AckWait. MaxDeliver is unbounded: each redelivery needs a process
// to stop mid-delivery, and a hold that has expired is acked unsent.
func consumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       Consumer,
		Description:   "Airlock notify: holds to webhooks",
		DeliverPolicy: jetstream.DeliverNewPolicy,
		FilterSubject: events.OpEventSubject("*", "*", "*", events.TypeHeld),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       AckWait,
		MaxDeliver:    -1,
		MaxAckPending: MaxAckPending,
	}
}

// Run announces holds until ctx ends. It returns once it has stopped
// taking holds and its deliveries have given up: those in flight are
// abandoned, their holds naked for another process, or the next start, to
// announce. It returns an error only when its consumer cannot be made.
func (n *Notifier) Run(ctx context.Context) error {
	if n.own {
		defer n.cfg.Client.CloseIdleConnections()
	}
	cons, err := n.consumer(ctx)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return err
	}
	close(n.ready)
	// A hold is taken only when a slot is free: none waits, unmarked, in
	// a client buffer while MaxInFlight slow deliveries go on, to be
	// redelivered elsewhere and then sent twice.
	var grp errgroup.Group
	defer func() { _ = grp.Wait() }() // the deliveries return no error
	slots := make(chan struct{}, n.cfg.MaxInFlight)
	for {
		if !n.idle(ctx) {
			return nil
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		m, err := n.next(ctx, cons)
		if err != nil {
			<-slots
			if ctx.Err() != nil {
				return nil
			}
			if cons, err = n.fetchFailed(ctx, cons, err); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			continue
		}
		grp.Go(func() error {
			defer func() { <-slots }()
			stop := inProgress(m)
			defer stop()
			n.handle(ctx, m)
			return nil
		})
	}
}

// IdlePoll is how often a notifier with no webhook to send to (Config.Active
// false) asks again.
const IdlePoll = time.Second

// idle waits while no workspace has a webhook, taking no hold; false when
// ctx ended first.
func (n *Notifier) idle(ctx context.Context) bool {
	if n.cfg.Active == nil || n.cfg.Active() {
		return ctx.Err() == nil
	}
	t := time.NewTicker(IdlePoll)
	defer t.Stop()
	for !n.cfg.Active() {
		select {
		case <-t.C:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// consumer creates or updates the durable consumer, trying again while
// the cluster settles.
func (n *Notifier) consumer(ctx context.Context) (jetstream.Consumer, error) {
	cons, err := streams.AwaitConsumer(ctx, n.cfg.Logger, Consumer, func(ctx context.Context) (jetstream.Consumer, error) {
		return n.cfg.JetStream.CreateOrUpdateConsumer(ctx, streams.Ops, consumerConfig())
	})
	if err != nil {
		return nil, fmt.Errorf("notify: consumer: %w", err)
	}
	return cons, nil
}

// next takes one held event, waiting at most streams.PullExpiry; a
// timeout is nats.ErrTimeout.
func (n *Notifier) next(ctx context.Context, cons jetstream.Consumer) (jetstream.Msg, error) {
	fctx, cancel := context.WithTimeout(ctx, streams.PullExpiry)
	defer cancel()
	return cons.Next(jetstream.FetchContext(fctx))
}

// fetchFailed handles an error of next: a consumer that is gone is made
// again; a timeout is no error; anything else (a cluster settling, a lost
// connection) is logged and tried again after a second. A pull from a
// consumer that does not exist gets no answer, or no responders, so
// whether it is gone is asked. It returns an error when ctx ends, or when
// the consumer cannot be made again.
func (n *Notifier) fetchFailed(ctx context.Context, cons jetstream.Consumer, err error) (jetstream.Consumer, error) {
	gone := errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted)
	if !gone {
		ictx, cancel := context.WithTimeout(ctx, streams.TryTimeout)
		_, ierr := cons.Info(ictx)
		cancel()
		gone = errors.Is(ierr, jetstream.ErrConsumerNotFound)
	}
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case gone:
		n.cfg.Logger.Warn("notify consumer is gone; making it again", "stream", streams.Ops, "err", err)
		n.deleted(ctx, cons)
		return n.consumer(ctx)
	case errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded):
		return cons, nil
	}
	n.cfg.Logger.Warn("notify consumer: no hold taken; trying again", "stream", streams.Ops, "err", err)
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-t.C:
		return cons, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// deleted waits, at most streams.TryTimeout, until the server no longer
// knows cons: a pull is told of a delete before the server has let go of
// the consumer and removed its directory, and a consumer made in between
// meets the old one (which AwaitConsumer waits out) or loses its new
// directory to the old one's removal.
func (n *Notifier) deleted(ctx context.Context, cons jetstream.Consumer) {
	ctx, cancel := context.WithTimeout(ctx, streams.TryTimeout)
	defer cancel()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := cons.Info(ctx); errors.Is(err, jetstream.ErrConsumerNotFound) || ctx.Err() != nil {
			return
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// abandonedDelay is how long a hold whose delivery was cut short by a
// stop waits before JetStream hands it out again. Without it the server
// may hand it straight back to this notifier's own pull, still open on the
// server for an instant after the stop, and a message sent there is
// lost until the ack wait (AckWait) ends.
const abandonedDelay = time.Second

// inProgress tells JetStream every AckWait/3 that m is still in hand,
// until stop is called; stop returns once the ticking has stopped.
func inProgress(m jetstream.Msg) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(AckWait / 3)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				_ = m.InProgress()
			case <-done:
				return
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}

// handle settles one held event: acked once its notification has ended,
// or when there is none to send; naked when ctx ended first.
func (n *Notifier) handle(ctx context.Context, m jetstream.Msg) {
	log := n.cfg.Logger
	_, _, data, err := events.DecodeStored(m.Headers(), m.Data())
	if err != nil {
		log.Warn("held event does not decode; not announced", "subject", m.Subject(), "err", err)
		_ = m.Ack()
		return
	}
	h, ok := data.(*events.Held)
	ws, opID, _, _, okSubj := events.OpSubjectParts(m.Subject())
	if !ok || !okSubj || h.OpID != opID || h.Workspace != ws || h.Request == nil {
		log.Warn("held event without its op's summary, or on another op's subject; not announced", "subject", m.Subject())
		_ = m.Ack()
		return
	}
	webhook := n.cfg.Webhook(ws)
	if webhook == "" {
		log.Debug("no webhook for the workspace", "ws", ws, "hold", h.HoldID)
		_ = m.Ack()
		return
	}
	outcome := n.deliver(ctx, webhook, h)
	if outcome == "" {
		// Airlock stops: another process, or the next start, sends it.
		_ = m.NakWithDelay(abandonedDelay)
		return
	}
	n.m.deliveries.WithLabelValues(ws, outcome).Inc()
	_ = m.Ack()
}
