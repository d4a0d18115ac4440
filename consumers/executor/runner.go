package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/failpoint"
	"github.com/airlock-dev/airlock/internal/handoff"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/pull"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"golang.org/x/sync/errgroup"
)

// Source is the ce-source prefix of the events runners write.
const Source = "airlock/executor"

// Config configures a Runner.
type Config struct {
	// JetStream reads decided events and appends op events. Required.
	JetStream jetstream.JetStream
	// Registry holds the executors to run. Required.
	Registry *Registry
	// Workers bounds the calls of one batch that run at once, and the
	// batch size; default 64.
	Workers int
	// Loops is how many batches of one tool are in hand at once; a slow
	// call holds up only its own batch. Default 4.
	Loops int
	// ClaimTimeout is how long a claimed op may go without a heartbeat
	// before its decided event is redelivered and recovery decides; default
	// 30s. Runners heartbeat every third of it while a call runs.
	ClaimTimeout time.Duration
	// RecordRetries is how often a result append is retried before the
	// runner gives up and leaves the op to recovery; default 5.
	RecordRetries int
	// Handoff, when set, holds args the gate of this process admitted:
	// an op found there is not read back from AIRLOCK_REQUESTS.
	Handoff *handoff.Args
	// Group names the durable consumers (one per tool) the runner takes
	// work from; runners of one group share it. Default
	// streams.DefaultExecutorGroup.
	Group string
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Validate checks the config and fills defaults.
func (c *Config) Validate() error {
	if c.JetStream == nil || c.Registry == nil {
		return errors.New("executor: JetStream and Registry are required")
	}
	if c.Workers <= 0 {
		c.Workers = 64
	}
	if c.Loops <= 0 {
		c.Loops = 4
	}
	if c.ClaimTimeout <= 0 {
		c.ClaimTimeout = 30 * time.Second
	}
	if c.ClaimTimeout < 300*time.Millisecond {
		return fmt.Errorf("executor: ClaimTimeout %s below 300ms", c.ClaimTimeout)
	}
	if c.Group == "" {
		c.Group = streams.DefaultExecutorGroup
	}
	if c.RecordRetries <= 0 {
		c.RecordRetries = 5
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Runner runs the registered executors over their tools' decided events.
type Runner struct {
	cfg Config
	// id names this runner in its claims: a claim made by another runner
	// whose delivery came back to this one was lost, whatever the
	// delivery counts say (they can go back after an unclean stop).
	id       string
	ops      jetstream.Stream
	requests jetstream.Stream
	inflight inflight
}

// NewRunner returns a runner.
func NewRunner(cfg Config) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Runner{cfg: cfg, id: nuid.Next(), inflight: inflight{ops: map[string]struct{}{}}}, nil
}

// Run takes the decided events of every registered tool until ctx ends.
func (r *Runner) Run(ctx context.Context) error {
	js := r.cfg.JetStream
	ops, err := js.Stream(ctx, streams.Ops)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	reqs, err := js.Stream(ctx, streams.Requests)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	r.ops, r.requests = ops, reqs
	g, gctx := errgroup.WithContext(ctx)
	for _, tool := range r.cfg.Registry.Tools() {
		ex, _ := r.cfg.Registry.Lookup(tool)
		cons, err := js.CreateOrUpdateConsumer(ctx, streams.Ops, jetstream.ConsumerConfig{
			Durable:       streams.ExecutorConsumer(r.cfg.Group, tool),
			Description:   "Airlock executors of tool " + tool + ": decided events",
			FilterSubject: events.ReadySubjects(tool),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       r.cfg.ClaimTimeout,
			MaxDeliver:    -1,
			MaxAckPending: 2 * r.cfg.Loops * r.cfg.Workers,
		})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("executor: consumer for %s: %w", tool, err)
		}
		g.Go(func() error {
			// Deliveries are marked in progress from the moment they arrive
			// until settled, queued or running: JetStream redelivers only
			// what a process that is gone held.
			beat := pull.Config{Loops: r.cfg.Loops, Max: r.cfg.Workers, Heartbeat: r.cfg.ClaimTimeout / 3}
			return pull.Batches(gctx, cons, beat, func(ctx context.Context, msgs []jetstream.Msg) {
				r.handleBatch(ctx, ex, msgs)
			})
		})
	}
	return g.Wait()
}

// job is one delivered decided event of a batch.
type job struct {
	m     jetstream.Msg
	d     delivery
	log   *slog.Logger
	call  Call
	fetch error
	claim *oplog.Pending
	seq   uint64 // sequence of this attempt's claim
	err   error  // how the item settles; see settle
}

// handleBatch settles a batch of decided events: args are fetched together,
// claims appended together, the calls run concurrently (at most Workers at
// once), and the outcomes appended together before the items are acked.
func (r *Runner) handleBatch(ctx context.Context, ex Executor, msgs []jetstream.Msg) {
	jobs := make([]*job, 0, len(msgs))
	for _, m := range msgs {
		if j := r.newJob(m); j != nil {
			jobs = append(jobs, j)
		}
	}
	if len(jobs) == 0 {
		return
	}
	defer func() {
		for _, j := range jobs {
			r.inflight.release(j.d.item.OpID)
		}
	}()

	r.fetchAll(ctx, jobs)
	for _, j := range jobs {
		if j.fetch == nil {
			j.call.Attempt = nuid.Next()
			j.claim = oplog.Start(r.cfg.JetStream, opOf(j.d.item), j.d.item.ReadySeq, events.TypeClaimed, Source, r.claimEvent(ex, j))
		}
	}
	var run []*job
	for _, j := range jobs {
		switch {
		case j.fetch != nil:
			j.err = r.unfetched(ctx, j)
		default:
			seq, err := j.claim.Wait(ctx, r.ops)
			switch {
			case errors.Is(err, oplog.ErrConflict):
				if j.seq, j.err = r.conflict(ctx, ex, j); j.seq > 0 {
					run = append(run, j)
				}
			case err != nil:
				j.err = fmt.Errorf("%w: %w", errNotClaimed, err)
			default:
				j.seq = seq
				run = append(run, j)
			}
		}
	}
	type ran struct {
		result json.RawMessage
		err    error
		took   time.Duration
	}
	outs := make(map[*job]ran, len(run))
	var mu sync.Mutex
	r.each(run, func(j *job) {
		failpoint.Hit(failpoint.AfterClaim, ex.Tool())
		start := time.Now()
		var res json.RawMessage
		err := operandsUnchanged(ctx, ex, j.call, j.d.item.Operands)
		if err == nil {
			res, err = ex.Execute(ctx, j.call)
		}
		mu.Lock()
		outs[j] = ran{res, err, time.Since(start)}
		mu.Unlock()
	})
	records := make([]*oplog.Pending, len(run))
	results := make([]json.RawMessage, len(run)) // for the replies only
	for i, j := range run {
		o := outs[j]
		if ctx.Err() != nil && o.err != nil {
			// Shut down mid-call: the claim stands and recovery decides.
			j.err = fmt.Errorf("execute %s: %w", j.d.item.OpID, ctx.Err())
			continue
		}
		if err := failpoint.Err(failpoint.RecordError, ex.Tool()); err != nil {
			// As if storing the outcome failed after the side effect: the
			// claim stands, nobody is told anything, recovery decides.
			j.err = err
			continue
		}
		typ, data, kept := outcome(j.call, j.d.item, o.result, o.err, o.took, false)
		results[i] = kept
		records[i] = oplog.Start(r.cfg.JetStream, opOf(j.d.item), j.seq, typ, Source, data)
	}
	for i, j := range run {
		if records[i] == nil {
			continue
		}
		_, err := records[i].Wait(ctx, r.ops)
		switch {
		case err == nil:
			r.answer(j.d.item, records[i].Data(), results[i])
			failpoint.Hit(failpoint.AfterResult, ex.Tool())
			r.forget(ctx, j.d.item)
		case !errors.Is(err, oplog.ErrConflict):
			o := outs[j]
			j.err = r.record(ctx, j.call, j.d.item, j.seq, o.result, o.err, o.took, false)
		}
	}
	for _, j := range jobs {
		r.settle(j)
	}
}

// operandsUnchanged takes the hashes of the call's operands again, now
// that the claim is held, and refuses to run (OPERANDS_CHANGED) if any
// differs from what the gate recorded when it decided: what was checked,
// and perhaps approved, is what runs.
func operandsUnchanged(ctx context.Context, ex Executor, call Call, want map[string]string) error {
	ob, ok := ex.(Operands)
	if !ok {
		return nil
	}
	byPath, err := ob.Operands(ctx, call.Workspace, call.Args)
	if err != nil {
		return err
	}
	// The decision recorded them by path digest; so do the messages,
	// which the op's failed event stores.
	now := events.OperandKeys(byPath)
	for key, h := range now {
		if want[key] != h {
			return events.Errorf(events.CodeOperandsChanged, "the file with path digest %s changed since the decision (was %s, is %s); nothing ran", key, orAbsent(want[key]), h)
		}
	}
	for key, h := range want {
		if _, ok := now[key]; !ok {
			return events.Errorf(events.CodeOperandsChanged, "the file with path digest %s (%s at the decision) is no longer an operand; nothing ran", key, h)
		}
	}
	return nil
}

func orAbsent(h string) string {
	if h == "" {
		return "not recorded"
	}
	return h
}

// work is what an executor needs from a decided event.
type work struct {
	OpID       string
	Workspace  string
	Agent      string
	Tool       string
	RequestSeq uint64 // the tool.requested message that carries the args
	ReadySeq   uint64 // the decided event: what the claim expects
	ReplyTo    string // the request's Airlock-Reply-To inbox, if any
	// Operands are the file hashes the gate recorded at the decision.
	Operands map[string]string
}

// newJob reads a decided event; nil means it was settled here.
func (r *Runner) newJob(m jetstream.Msg) *job {
	md, err := m.Metadata()
	if err != nil {
		r.cfg.Logger.Error("decided event metadata", "subject", m.Subject(), "err", err)
		_ = m.Term()
		return nil
	}
	_, _, data, derr := events.DecodeStored(m.Headers(), m.Data())
	d, ok := data.(*events.Decided)
	if derr != nil || !ok || d.Request == nil || !events.ValidOpID(d.OpID) || !events.ValidName(d.Workspace) {
		r.cfg.Logger.Error("decided event does not decode; dropped", "subject", m.Subject(), "seq", md.Sequence.Stream, "err", derr)
		_ = m.Term()
		return nil
	}
	item := work{
		OpID: d.OpID, Workspace: d.Workspace, Agent: d.Request.Agent, Tool: d.Request.Tool,
		RequestSeq: d.Request.RequestSeq, ReadySeq: md.Sequence.Stream, ReplyTo: m.Headers().Get(events.HeaderReplyTo),
		Operands: d.Request.Operands,
	}
	if !r.inflight.take(item.OpID) {
		return nil // another delivery is in hand here; leave this one alone
	}
	return &job{
		m:   m,
		d:   delivery{item: item, workSeq: md.Sequence.Stream, n: md.NumDelivered},
		log: r.cfg.Logger.With("op", item.OpID, "ws", item.Workspace),
	}
}

// settle acks, naks or leaves a delivery as its job's error says.
func (r *Runner) settle(j *job) {
	switch err := j.err; {
	case err == nil:
		_ = j.m.Ack()
	case errors.Is(err, errLeave):
		// A newer delivery of this item holds the claim: it settles it.
	case errors.Is(err, errNotClaimed):
		j.log.Warn("op not claimed; will retry", "err", err)
		_ = j.m.NakWithDelay(time.Second)
	default:
		// Claimed but not settled: leave the item unacked, so it comes
		// back after ClaimTimeout and recovery decides.
		j.log.Warn("op left to recovery", "err", err)
	}
}

// each runs f for every job, at most Workers at once, and waits.
func (r *Runner) each(jobs []*job, f func(*job)) {
	if len(jobs) == 1 {
		f(jobs[0])
		return
	}
	sem := make(chan struct{}, r.cfg.Workers)
	var wg sync.WaitGroup
	for _, j := range jobs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(j)
		}()
	}
	wg.Wait()
}

func (r *Runner) claimEvent(ex Executor, j *job) *events.Claimed {
	return &events.Claimed{
		OpHeader: hdr(j.d.item), Attempt: j.call.Attempt, Executor: ex.Tool(),
		WorkSeq: j.d.workSeq, Delivery: j.d.n, Consumer: streams.ExecutorConsumer(r.cfg.Group, ex.Tool()),
		Runner: r.id,
	}
}

func opOf(item work) oplog.Op {
	return oplog.Op{Workspace: item.Workspace, ID: item.OpID, Tool: item.Tool}
}

var (
	errLeave      = errors.New("executor: a newer delivery holds the claim")
	errNotClaimed = errors.New("executor: failed before claiming")
)

// delivery is one delivery of a decided event.
type delivery struct {
	item    work
	workSeq uint64 // the decided event's sequence in AIRLOCK_OPS
	n       uint64 // its delivery count
}

func (r *Runner) append(ctx context.Context, item work, expect uint64, t events.Type, data any) (uint64, error) {
	return oplog.Append(ctx, r.cfg.JetStream, r.ops, opOf(item), expect, t, Source, data)
}

func hdr(item work) events.OpHeader {
	return events.OpHeader{OpID: item.OpID, Workspace: item.Workspace}
}

// inflight is the set of ops this process is running, so two deliveries of
// one decided event in hand at once do not both act.
type inflight struct {
	mu  sync.Mutex
	ops map[string]struct{}
}

func (f *inflight) take(op string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, busy := f.ops[op]; busy {
		return false
	}
	f.ops[op] = struct{}{}
	return true
}

func (f *inflight) release(op string) {
	f.mu.Lock()
	delete(f.ops, op)
	f.mu.Unlock()
}
