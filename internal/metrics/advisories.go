package metrics

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// Reasons of the terminated advisories JetStream sends for a message
// deleted while a consumer waits for its ack: deletedUnacked at the
// delete, deletedLimits when the consumer finds it gone later (after a
// leader change, say), which is also what a stream's limits cause.
const (
	deletedUnacked = "Unacknowledged message was deleted"
	deletedLimits  = "Message deleted by stream limits"
)

// erased reports whether a terminated advisory is the gate's erasure of a
// request (ADR 0010) rather than a message given up on. AIRLOCK_REQUESTS
// has no limits that delete messages (its requests leave it only by
// erasure), so there both reasons are erasures.
func erased(stream, reason string) bool {
	return reason == deletedUnacked || (stream == streams.Requests && reason == deletedLimits)
}

// lookupTimeout bounds the lookup of the op an advisory is about.
const lookupTimeout = 500 * time.Millisecond

// MaxAdvisoryBacklog bounds the advisories waiting to be handled; beyond
// it the subscription drops them (NATS slow-consumer handling) and the
// drop is logged.
const MaxAdvisoryBacklog = 4096

// advisories counts JetStream's advisories about Airlock's streams and
// their consumers, and logs, naming the op, every message a consumer gave
// up on (MAX_DELIVERIES) or terminated.
type advisories struct {
	cfg         Config
	all         *prometheus.CounterVec
	maxDeliver  *prometheus.CounterVec
	terminated  *prometheus.CounterVec
	ownStreams  map[string]bool
	subscribeTo []string
}

func newAdvisories(cfg Config) *advisories {
	a := &advisories{
		cfg: cfg,
		all: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: Advisories,
			Help: "JetStream advisories about Airlock's streams and their consumers, by kind (the advisory subject's kind, lower case: consumer_max_deliveries, stream_leader_elected, ...) and stream.",
		}, []string{"kind", "stream"}),
		maxDeliver: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MaxDeliveries,
			Help: "Messages a consumer of Airlock's streams stopped redelivering after its maximum deliveries.",
		}, []string{"stream", "consumer"}),
		terminated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: Terminated,
			Help: "Messages a consumer of Airlock's streams terminated (will never redeliver).",
		}, []string{"stream", "consumer"}),
		ownStreams: map[string]bool{},
	}
	for _, s := range []string{streams.Requests, streams.Ops, "KV_" + streams.AuditBucket} {
		a.ownStreams[s] = true
		// $JS.EVENT.ADVISORY.STREAM.<kind>.<stream> and
		// $JS.EVENT.ADVISORY.CONSUMER.<kind>.<stream>.<consumer>: not
		// $JS.EVENT.ADVISORY.> as a whole, whose API audit advisories
		// come with every JetStream request of every client.
		a.subscribeTo = append(a.subscribeTo,
			server.JSAdvisoryPrefix+".STREAM.*."+s,
			server.JSAdvisoryPrefix+".CONSUMER.*."+s+".*")
	}
	return a
}

func (a *advisories) collectors() []prometheus.Collector {
	return []prometheus.Collector{a.all, a.maxDeliver, a.terminated}
}

// run subscribes to the advisories and handles them until ctx ends.
func (a *advisories) run(ctx context.Context) error {
	nc := a.cfg.JetStream.Conn()
	ch := make(chan *nats.Msg, MaxAdvisoryBacklog)
	var subs []*nats.Subscription
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	for _, subj := range a.subscribeTo {
		s, err := nc.ChanSubscribe(subj, ch)
		if err != nil {
			return fmt.Errorf("metrics: advisories: %w", err)
		}
		subs = append(subs, s)
	}
	// Advisories are for watching: a connection slow to confirm the
	// subscriptions must not stop the process. They take effect once it
	// reconnects or catches up.
	if err := nc.FlushTimeout(a.cfg.Timeout); err != nil && ctx.Err() == nil {
		a.cfg.Logger.Warn("advisory subscriptions not confirmed yet", "err", err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-ch:
			a.handle(ctx, m)
		}
	}
}

// handle counts one advisory and, for a message given up on, logs its op.
func (a *advisories) handle(ctx context.Context, m *nats.Msg) {
	// $JS.EVENT.ADVISORY.<STREAM|CONSUMER>.<KIND>.<stream>[.<consumer>]
	tok := strings.Split(m.Subject, ".")
	if len(tok) < 6 || !a.ownStreams[tok[5]] {
		return
	}
	kind, stream := strings.ToLower(tok[3]+"_"+tok[4]), tok[5]
	a.all.WithLabelValues(kind, stream).Inc()
	var adv struct {
		Type       string `json:"type"`
		Stream     string `json:"stream"`
		Consumer   string `json:"consumer"`
		StreamSeq  uint64 `json:"stream_seq"`
		Deliveries uint64 `json:"deliveries"`
		Reason     string `json:"reason"`
	}
	switch kind {
	case "consumer_max_deliveries", "consumer_msg_terminated":
	default:
		return
	}
	if err := json.Unmarshal(m.Data, &adv); err != nil || adv.Stream != stream {
		a.cfg.Logger.Warn("jetstream advisory does not decode", "subject", m.Subject, "err", err)
		return
	}
	counter, what := a.maxDeliver, "message reached its consumer's maximum deliveries; it will not be delivered again"
	if kind == "consumer_msg_terminated" {
		if erased(adv.Stream, adv.Reason) {
			// The gate erases a request before it acks it; a message
			// deleted while it waits for its ack is not one given up on.
			a.cfg.Logger.Debug("unacknowledged message deleted", "stream", adv.Stream, "consumer", adv.Consumer, "seq", adv.StreamSeq, "reason", adv.Reason)
			return
		}
		counter, what = a.terminated, "message terminated by its consumer; it will not be delivered again"
	}
	counter.WithLabelValues(adv.Stream, adv.Consumer).Inc()
	ws, op, subject := a.opOf(ctx, adv.Stream, adv.StreamSeq)
	a.cfg.Logger.Error(what, "op", op, "ws", ws, "stream", adv.Stream, "consumer", adv.Consumer,
		"seq", adv.StreamSeq, "subject", subject, "deliveries", adv.Deliveries, "reason", adv.Reason)
}

// opOf reads the message at seq and names its op: from the subject of an
// op event, from the Nats-Msg-Id (the request fingerprint) of a request.
// Empty when the message is gone (a scrubbed request) or names none.
func (a *advisories) opOf(ctx context.Context, stream string, seq uint64) (ws, op, subject string) {
	// Best effort, on the advisories' own goroutine: short.
	ctx, cancel := context.WithTimeout(ctx, min(a.cfg.Timeout, lookupTimeout))
	defer cancel()
	s, err := a.cfg.JetStream.Stream(ctx, stream)
	if err != nil {
		return "", "", ""
	}
	msg, err := s.GetMsg(ctx, seq)
	if err != nil {
		return "", "", ""
	}
	if w, o, _, _, ok := events.OpSubjectParts(msg.Subject); ok {
		return w, o, msg.Subject
	}
	if w, _, ok := events.RequestSubjectParts(msg.Subject); ok {
		var fp [32]byte
		if id := msg.Header.Get(nats.MsgIdHdr); decodeHex32(id, &fp) {
			return w, events.OpID(fp), msg.Subject
		}
		return w, "", msg.Subject
	}
	return "", "", msg.Subject
}

func decodeHex32(s string, out *[32]byte) bool {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(out) {
		return false
	}
	copy(out[:], b)
	return true
}
