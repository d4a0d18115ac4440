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
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/pull"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"golang.org/x/sync/errgroup"
)

// Source is the ce-source prefix of the events runners write.
const Source = "airlock/executor"

// Runner runs the registered executors over their tools' decided events.
type Runner struct {
	cfg Config
	w   *oplog.Writer // its own, closed when Run returns
	// id names this runner in its claims: a claim made by another runner
	// whose delivery came back to this one was lost, whatever the
	// delivery counts say (they can go back after an unclean stop).
	id       string
	ops      jetstream.Stream
	requests jetstream.Stream
	inflight inflight
	// direct bounds the ops the gate of this process runs at once
	// (Start): Config.Direct.
	direct chan struct{}

	provisioned sync.Once
	consumers   map[string]jetstream.Consumer // by tool
	provErr     error
}

// NewRunner returns a runner.
func NewRunner(cfg Config) (*Runner, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w, err := oplog.NewWriter(cfg.JetStream)
	if err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	return &Runner{
		cfg: cfg, w: w, id: nuid.Next(), inflight: inflight{ops: map[string]struct{}{}},
		direct: make(chan struct{}, cfg.Direct),
	}, nil
}

// Instance is the instance id the runner's claims carry.
func (r *Runner) Instance() string { return r.cfg.Instance }

// Provision creates the runner's durable consumers, one per tool, unless
// they exist: with the group's filter, or else it is an error (another
// process of the group serves other workspaces). Run calls it; a process
// calls it before its gate starts, so that the gate knows the tools and
// workspaces served before it decides anything. Transient JetStream
// errors are retried until ctx ends.
func (r *Runner) Provision(ctx context.Context) error {
	r.provisioned.Do(func() { r.provErr = r.provision(ctx) })
	return r.provErr
}

func (r *Runner) provision(ctx context.Context) error {
	js := r.cfg.JetStream
	err := streams.Await(ctx, r.cfg.Logger, "the executors' streams", func(ctx context.Context) error {
		var err error
		if r.ops, err = js.Stream(ctx, streams.Ops); err != nil {
			return err
		}
		r.requests, err = js.Stream(ctx, streams.Requests)
		return err
	})
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	r.consumers = map[string]jetstream.Consumer{}
	for _, tool := range r.cfg.Registry.Tools() {
		want := jetstream.ConsumerConfig{
			Durable:        streams.ExecutorConsumer(r.cfg.Group, tool),
			Description:    "Airlock executors of tool " + tool + ": decided events",
			FilterSubjects: events.ReadySubjectsOf(tool, r.cfg.Workspaces),
			AckPolicy:      jetstream.AckExplicitPolicy,
			AckWait:        r.cfg.ClaimTimeout,
			MaxDeliver:     -1,
			MaxAckPending:  2 * r.cfg.Loops * r.cfg.Workers,
		}
		cons, err := streams.AwaitConsumer(ctx, r.cfg.Logger, want.Durable, func(ctx context.Context) (jetstream.Consumer, error) {
			return streams.ExecutorConsumerFor(ctx, js, want)
		})
		if err != nil {
			return fmt.Errorf("executor: consumer for %s: %w", tool, err)
		}
		r.consumers[tool] = cons
	}
	return nil
}

// Run takes the decided events of every registered tool until ctx ends.
func (r *Runner) Run(ctx context.Context) error {
	defer r.w.Close()
	// The ops the gate started store their outcomes with r.w too.
	defer r.drainDirect()
	if err := r.Provision(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, tool := range r.cfg.Registry.Tools() {
		ex, _ := r.cfg.Registry.Lookup(tool)
		cons := r.consumers[tool]
		// Deliveries are beaten every third of this process's claim
		// timeout: the shared consumer's ack wait must not drop below it.
		g.Go(func() error {
			streams.KeepAckWait(gctx, r.cfg.JetStream, streams.Ops, streams.ExecutorConsumer(r.cfg.Group, tool), r.cfg.ClaimTimeout, r.cfg.ClaimTimeout/3, r.cfg.Logger)
			return nil
		})
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
	g.Go(func() error { r.sweep(gctx); return nil })
	return g.Wait()
}

// job is one delivered decided event of a batch.
type job struct {
	m     jetstream.Msg
	d     delivery
	log   *slog.Logger
	call  Call
	fetch error
	err   error // how the item settles; see settle
}

// handleBatch settles a batch of decided events: args are fetched
// together; then each op is taken and run through to its outcome (run),
// at most Workers at once, their appends pipelined on the runner's
// publisher, before the items are settled.
func (r *Runner) handleBatch(ctx context.Context, ex Executor, msgs []jetstream.Msg) {
	if ctx.Err() != nil {
		// Stopping: nothing of the batch is begun; it goes back at once,
		// for a runner that goes on.
		for _, m := range msgs {
			_ = m.Nak()
		}
		return
	}
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

	if jobs = r.archived(ctx, jobs); len(jobs) == 0 {
		return
	}
	r.fetchAll(ctx, jobs)
	r.each(jobs, func(j *job) {
		if j.fetch != nil {
			j.err = r.unfetched(ctx, ex, j)
			return
		}
		j.call.Attempt = nuid.Next()
		j.err = r.run(ctx, ex, j, j.d.item.ReadySeq, "")
	})
	for _, j := range jobs {
		r.settle(j)
	}
}

// run takes the op for the job's attempt and carries it through to its
// outcome. The operands are checked and the executor prepares; then one
// started event claims the op and starts the attempt (ADR 0023), appended
// against expect: the decided event, or, when the attempt recovers a lost
// one (recovers names it), that attempt's newest event. Only once it is
// stored does the executor run, and the outcome is stored against it.
// Nothing before the started event has an effect, so a runner that dies
// or loses the append there leaves nothing to recover. It returns how the
// delivery settles: nil is an ack.
func (r *Runner) run(ctx context.Context, ex Executor, j *job, expect uint64, recovers string) error {
	item, call, log := j.d.item, j.call, j.log
	start := time.Now()
	err := operandsUnchanged(ctx, ex, call, item.Operands)
	if err == nil {
		call.Evidence, err = prepare(ctx, ex, call)
	}
	if err != nil {
		return r.refuse(ctx, ex, j, expect, recovers, err)
	}
	failpoint.Hit(failpoint.BeforeStart, ex.Tool())
	st := &events.Started{OpHeader: hdr(item), Attempt: call.Attempt, Evidence: call.Evidence, Claim: r.claim(ex, j.d, recovers)}
	seq, err := r.append(ctx, item, expect, events.TypeStarted, st)
	switch {
	case errors.Is(err, oplog.ErrConflict):
		// Another runner took the op, or this very event landed and its
		// answer was lost: the op's newest event tells.
		if recovers != "" {
			seq, err = r.startedAfterConflict(ctx, item, call.Attempt, expect, log)
		} else {
			seq, err = r.conflict(ctx, ex, j)
		}
		if err != nil || seq == 0 {
			return err
		}
	case err != nil:
		// Nothing ran. Whether the started event landed is unknown;
		// whoever settles the op next reads it, and reruns only if it
		// did not.
		return fmt.Errorf("%w: started: %w", errNotClaimed, err)
	}
	return r.execute(ctx, ex, call, item, seq, start, recovers != "")
}

// execute calls the executor for an attempt whose started event is
// stored at seq, and stores the outcome against it; start is when the
// attempt began.
func (r *Runner) execute(ctx context.Context, ex Executor, call Call, item work, seq uint64, start time.Time, recovered bool) error {
	failpoint.Hit(failpoint.AfterStarted, ex.Tool())
	result, err := ex.Execute(ctx, call)
	if ctx.Err() != nil && err != nil {
		// Shut down mid-call: the claim stands and recovery decides.
		return fmt.Errorf("execute %s: %w", item.OpID, ctx.Err())
	}
	if ferr := failpoint.Err(failpoint.RecordError, ex.Tool()); ferr != nil {
		// As if storing the outcome failed after the side effect: the
		// claim stands, nobody is told anything, recovery decides.
		return ferr
	}
	// The call has run: its outcome is stored even when the process is
	// shutting down meanwhile, for up to recordGrace after, rather than
	// left for recovery to work out.
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(recordGrace, cancel) })
	defer stop()
	return r.record(rctx, call, item, seq, result, err, time.Since(start), recovered)
}

// reservedRetryDelay is how long a decided event of an op that the gate
// of this process holds waits before it is delivered again.
const reservedRetryDelay = 50 * time.Millisecond

// recordGrace is how long a runner that is shutting down keeps trying to
// store the outcome of a call that has run.
const recordGrace = 5 * time.Second

// refuse ends an op whose call was refused before it started (its
// operands changed, its executor could not prepare): nothing ran, and
// nothing took the op. A recovery's refusal ends the op under the lost
// attempt. A first run's is appended against the decided event, so only
// a still-ready op fails; if the op has moved on (another runner took it,
// or an earlier delivery's attempt did, and changed the operands with its
// effect), the op is settled from its newest event as a lost claim is.
func (r *Runner) refuse(ctx context.Context, ex Executor, j *job, expect uint64, recovers string, xerr error) error {
	call, item := j.call, j.d.item
	if recovers != "" {
		call.Attempt = recovers
		return r.record(ctx, call, item, expect, nil, xerr, 0, true)
	}
	typ, data, _ := outcome(call, item, nil, xerr, 0, false)
	err := r.appendTerminal(ctx, item, expect, typ, data, nil)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, oplog.ErrConflict):
		_, err = r.conflict(ctx, ex, j)
		return err
	}
	return fmt.Errorf("%w: %w", errNotClaimed, err)
}

// startedAfterConflict settles a recovery's started event whose
// compare-and-swap was reported lost. Its sequence when it is stored
// after all (the call then runs); 0 and nil when the op has ended (the
// delivery is acked); errLeave when another runner's recovery holds the
// op (it settles the delivery); errNotClaimed when the read is behind (a
// redelivery settles it).
func (r *Runner) startedAfterConflict(ctx context.Context, item work, attempt string, expect uint64, log *slog.Logger) (uint64, error) {
	last, err := oplog.Last(ctx, r.ops, item.Workspace, item.OpID)
	if err != nil {
		return 0, fmt.Errorf("%w: started: %w", errNotClaimed, err)
	}
	if st, ok := last.Data.(*events.Started); ok && st.Attempt == attempt {
		return last.Seq, nil
	}
	if _, terminal := events.OutcomeReply(last.Data); terminal {
		r.ended(ctx, item, last.Data)
		return 0, nil
	}
	if last.Seq <= expect {
		return 0, fmt.Errorf("%w: read of %s is behind its started event", errNotClaimed, item.OpID)
	}
	log.Info("lost attempt recovered by another runner first; nothing ran here", "attempt", attempt, "event_type", last.Type)
	return 0, errLeave
}

// prepare asks a Preparer for its evidence and checks its size.
func prepare(ctx context.Context, ex Executor, call Call) (json.RawMessage, error) {
	p, ok := ex.(Preparer)
	if !ok {
		return nil, nil
	}
	ev, err := p.Prepare(ctx, call)
	if err != nil {
		return nil, err
	}
	if len(ev) > events.MaxEvidenceBytes {
		return nil, events.Errorf(events.CodeExecutorFailed, "%s: evidence of %d bytes, limit %d; nothing ran", ex.Tool(), len(ev), events.MaxEvidenceBytes)
	}
	if len(ev) > 0 && !json.Valid(ev) {
		return nil, events.Errorf(events.CodeExecutorFailed, "%s: evidence is not JSON; nothing ran", ex.Tool())
	}
	return ev, nil
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
	// Results is how long the policy keeps the result; nil in a decided
	// event of a version that kept none (DefaultResultTTL then).
	Results *events.Retention
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
		Operands: d.Request.Operands, Results: d.Results,
	}
	if !r.inflight.take(item.OpID) {
		if r.inflight.reserved(item.OpID) {
			// The gate of this process is appending a started event as
			// the op's first event, which this decided event already
			// is: that append fails and the gate lets go in a moment.
			// The decided event comes back then, to whichever runner.
			_ = m.NakWithDelay(reservedRetryDelay)
			return nil
		}
		return nil // another delivery is in hand here; leave this one alone
	}
	return &job{
		m:   m,
		d:   delivery{item: item, workSeq: md.Sequence.Stream, n: md.NumDelivered, consumer: streams.ExecutorConsumer(r.cfg.Group, item.Tool)},
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
	case errors.Is(err, errDefer):
		j.log.Info("lost attempt left to its own instance for now", "err", err)
		_ = j.m.NakWithDelay(r.cfg.OwnerRetryDelay)
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

// claim is the claim of an attempt taken through delivery d, recovering
// the attempt recovers names (empty on a first run).
func (r *Runner) claim(ex Executor, d delivery, recovers string) *events.Claim {
	return &events.Claim{
		Executor: ex.Tool(), Recovers: recovers,
		WorkSeq: d.workSeq, Delivery: d.n, Consumer: d.consumer,
		Runner: r.id, Instance: r.cfg.Instance, Host: r.cfg.Host,
	}
}

func opOf(item work) oplog.Op {
	return oplog.Op{Workspace: item.Workspace, ID: item.OpID, Tool: item.Tool}
}

var (
	errLeave      = errors.New("executor: a newer delivery holds the claim")
	errNotClaimed = errors.New("executor: failed before claiming")
	errDefer      = errors.New("executor: waiting for the attempt's own instance")
)

// delivery is one delivery of an op's work item: its decided event, or
// the request of an op the gate's process started (ADR 0025).
type delivery struct {
	item     work
	workSeq  uint64 // the work item's stream sequence
	n        uint64 // its delivery count
	consumer string // the durable consumer that delivered it
}

func (r *Runner) append(ctx context.Context, item work, expect uint64, t events.Type, data any) (uint64, error) {
	return r.w.Append(ctx, r.ops, opOf(item), expect, t, Source, data)
}

func hdr(item work) events.OpHeader {
	return events.OpHeader{OpID: item.OpID, Workspace: item.Workspace}
}

// inflight is the set of ops this process is running, so two deliveries of
// one decided event in hand at once do not both act.
type inflight struct {
	mu  sync.Mutex
	ops map[string]struct{}
	// starting is the ops the gate of this process reserved (Start): in
	// hand too, and also in ops.
	starting map[string]struct{}
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

// reserve takes op for the gate of this process (Start).
func (f *inflight) reserve(op string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, busy := f.ops[op]; busy {
		return false
	}
	f.ops[op] = struct{}{}
	if f.starting == nil {
		f.starting = map[string]struct{}{}
	}
	f.starting[op] = struct{}{}
	return true
}

// unreserve gives back what reserve took.
func (f *inflight) unreserve(op string) {
	f.mu.Lock()
	delete(f.ops, op)
	delete(f.starting, op)
	f.mu.Unlock()
}

// reserved reports whether the gate of this process holds op (reserve).
func (f *inflight) reserved(op string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.starting[op]
	return ok
}

func (f *inflight) release(op string) {
	f.mu.Lock()
	delete(f.ops, op)
	f.mu.Unlock()
}

// busy reports whether op is in hand here.
func (f *inflight) busy(op string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.ops[op]
	return ok
}
