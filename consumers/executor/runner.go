package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/pull"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go"
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
	cfg      Config
	ops      jetstream.Stream
	requests jetstream.Stream
	inflight inflight
}

// NewRunner returns a runner.
func NewRunner(cfg Config) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Runner{cfg: cfg, inflight: inflight{ops: map[string]struct{}{}}}, nil
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
				if seq, mine := r.ownClaim(ctx, j); mine {
					j.seq = seq
					run = append(run, j)
					continue
				}
				j.err = r.conflict(ctx, ex, j)
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
		start := time.Now()
		res, err := ex.Execute(ctx, j.call)
		mu.Lock()
		outs[j] = ran{res, err, time.Since(start)}
		mu.Unlock()
	})
	records := make([]*oplog.Pending, len(run))
	for i, j := range run {
		o := outs[j]
		if ctx.Err() != nil && o.err != nil {
			// Shut down mid-call: the claim stands and recovery decides.
			j.err = fmt.Errorf("execute %s: %w", j.d.item.OpID, ctx.Err())
			continue
		}
		typ, data := outcome(j.call, j.d.item, o.result, o.err, o.took, false)
		records[i] = oplog.Start(r.cfg.JetStream, opOf(j.d.item), j.seq, typ, Source, data)
	}
	for i, j := range run {
		if records[i] == nil {
			continue
		}
		_, err := records[i].Wait(ctx, r.ops)
		switch {
		case err == nil:
			r.answer(j.d.item, records[i].Data())
		case !errors.Is(err, oplog.ErrConflict):
			o := outs[j]
			j.err = r.record(ctx, j.call, j.d.item, j.seq, o.result, o.err, o.took, false)
		}
	}
	for _, j := range jobs {
		r.settle(j)
	}
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
	}
}

// unfetched settles a job whose args could not be read: a transient
// failure is retried; args that are gone fail the op if it is still ready.
func (r *Runner) unfetched(ctx context.Context, j *job) error {
	if events.CodeOf(j.fetch) != events.CodeRequestUnavailable {
		return fmt.Errorf("%w: %w", errNotClaimed, j.fetch)
	}
	failed := &events.Failed{OpHeader: hdr(j.d.item), Code: events.CodeRequestUnavailable, Message: j.fetch.Error()}
	_, err := r.append(ctx, j.d.item, j.d.item.ReadySeq, events.TypeFailed, failed)
	if err == nil {
		r.answer(j.d.item, failed)
	}
	if err != nil && !errors.Is(err, oplog.ErrConflict) {
		return fmt.Errorf("%w: %w", errNotClaimed, err)
	}
	return nil
}

// ownClaim reports whether the op's newest event is this job's own claim,
// reported as a conflict because a read-back lagged its landing.
func (r *Runner) ownClaim(ctx context.Context, j *job) (uint64, bool) {
	last, err := oplog.Last(ctx, r.ops, j.d.item.Workspace, j.d.item.OpID)
	if err != nil {
		return 0, false
	}
	c, ok := last.Data.(*events.Claimed)
	return last.Seq, ok && c.Attempt == j.call.Attempt
}

// conflict settles a job whose claim lost: the op moved on, another group
// claimed it, a later delivery holds the claim, or an earlier delivery of
// this very event claimed it and its runner is gone.
func (r *Runner) conflict(ctx context.Context, ex Executor, j *job) error {
	last, err := oplog.Last(ctx, r.ops, j.d.item.Workspace, j.d.item.OpID)
	if err != nil {
		return fmt.Errorf("%w: %w", errNotClaimed, err)
	}
	c, ok := last.Data.(*events.Claimed)
	switch {
	case last.Seq <= j.d.item.ReadySeq:
		// The read lags the write that beat our claim (a replica behind
		// the leader): look again later rather than drop the delivery.
		return fmt.Errorf("%w: read of %s is behind its claim", errNotClaimed, j.d.item.OpID)
	case !ok:
		j.log.Debug("op already moved on; delivery dropped", "event_type", last.Type)
		r.answer(j.d.item, last.Data)
		return nil
	case c.WorkSeq != j.d.workSeq || c.Consumer != streams.ExecutorConsumer(r.cfg.Group, ex.Tool()):
		return nil // claimed through another decided event, or another group
	case c.Delivery >= j.d.n:
		return errLeave
	}
	claim := r.claimEvent(ex, j)
	claim.Recovers = c.Attempt
	return r.recover(ctx, ex, j.call, j.d.item, claim, last.Seq, j.log)
}

// answer sends a terminal event's outcome to the request's reply inbox.
func (r *Runner) answer(item work, data any) {
	if item.ReplyTo == "" || !events.ValidInbox(item.ReplyTo) {
		return
	}
	reply, ok := events.OutcomeReply(data)
	if !ok {
		return
	}
	body, err := events.MarshalJSON(reply)
	if err == nil {
		err = r.cfg.JetStream.Conn().Publish(item.ReplyTo, body)
	}
	if err != nil {
		r.cfg.Logger.Debug("reply", "op", item.OpID, "subject", item.ReplyTo, "err", err)
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

// recover settles an op whose attempt claim.Recovers was claimed by a runner that is
// gone, as the executor decides.
func (r *Runner) recover(ctx context.Context, ex Executor, call Call, item work, claim *events.Claimed, expect uint64, log *slog.Logger) error {
	lost := claim.Recovers
	rec, err := ex.Recover(ctx, call, lost)
	if err != nil {
		return fmt.Errorf("recover %s: %w", item.OpID, err)
	}
	log.Info("recovering lost attempt", "attempt", lost, "action", rec.Action)
	if rec.Action == Ambiguous {
		amb := &events.Ambiguous{OpHeader: hdr(item), Attempt: lost, Code: events.CodeAmbiguous, Known: rec.Known}
		_, err := r.append(ctx, item, expect, events.TypeAmbiguous, amb)
		if err == nil {
			r.answer(item, amb)
		}
		if errors.Is(err, oplog.ErrConflict) {
			return nil
		}
		return err
	}
	seq, err := r.append(ctx, item, expect, events.TypeClaimed, claim)
	if errors.Is(err, oplog.ErrConflict) {
		return nil // another runner recovered it
	}
	if err != nil {
		return err
	}
	if rec.Action == Done {
		return r.record(ctx, call, item, seq, rec.Result, nil, 0, true)
	}
	return r.execute(ctx, ex, call, item, seq, true)
}

// execute runs the call under the claim at claimSeq and records the result.
func (r *Runner) execute(ctx context.Context, ex Executor, call Call, item work, claimSeq uint64, recovered bool) error {
	start := time.Now()
	result, xerr := ex.Execute(ctx, call)
	if ctx.Err() != nil && xerr != nil {
		// Shut down mid-call: the claim stands and recovery decides.
		return fmt.Errorf("execute %s: %w", item.OpID, ctx.Err())
	}
	return r.record(ctx, call, item, claimSeq, result, xerr, time.Since(start), recovered)
}

// record appends completed or failed for the attempt. It retries a failed
// append; a conflict means the op was recovered by another runner and this
// attempt's outcome no longer counts.
func (r *Runner) record(ctx context.Context, call Call, item work, claimSeq uint64, result json.RawMessage, xerr error, took time.Duration, recovered bool) error {
	typ, data := outcome(call, item, result, xerr, took, recovered)
	var err error
	for try := range r.cfg.RecordRetries {
		if try > 0 {
			select {
			case <-time.After(time.Duration(try) * 100 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		_, err = r.append(ctx, item, claimSeq, typ, data)
		if err == nil {
			r.answer(item, data)
		}
		if err == nil || errors.Is(err, oplog.ErrConflict) {
			return nil
		}
	}
	return fmt.Errorf("record %s of %s: %w", typ.Short(), item.OpID, err)
}

// outcome builds the terminal event for an execution.
func outcome(call Call, item work, result json.RawMessage, xerr error, took time.Duration, recovered bool) (events.Type, any) {
	failed := func(code events.Code, msg string) (events.Type, any) {
		return events.TypeFailed, &events.Failed{OpHeader: hdr(item), Attempt: call.Attempt, Code: code, Message: msg}
	}
	if xerr != nil {
		var e *events.Error
		if errors.As(xerr, &e) {
			return failed(e.Code, e.Message)
		}
		return failed(events.CodeExecutorFailed, xerr.Error())
	}
	if len(result) == 0 {
		result = json.RawMessage("null")
	}
	// Results are stored compact, not canonical: no fingerprint covers
	// them, and a result is never refused for how it spells a number.
	var buf bytes.Buffer
	if err := json.Compact(&buf, result); err != nil {
		return failed(events.CodeExecutorFailed, "result is not valid JSON: "+err.Error())
	}
	canon := buf.Bytes()
	if len(canon) > events.MaxResultBytes {
		return failed(events.CodeResultTooLarge, fmt.Sprintf("result is %d bytes, limit %d", len(canon), events.MaxResultBytes))
	}
	return events.TypeCompleted, &events.Completed{
		OpHeader: hdr(item), Attempt: call.Attempt, Result: canon,
		ResultDigest: events.Digest(canon), DurationMS: took.Milliseconds(), Recovered: recovered,
	}
}

// fetch reads the op's args from its request message and checks that they
// are the op's: the request's fingerprint must derive the op id.
func (r *Runner) fetch(ctx context.Context, item work) (Call, error) {
	raw, err := r.requests.GetMsg(ctx, item.RequestSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return callOf(item), events.Errorf(events.CodeRequestUnavailable, "request message %d is gone", item.RequestSeq)
	}
	if err != nil {
		return callOf(item), fmt.Errorf("fetch request %d: %w", item.RequestSeq, err)
	}
	return parseRequest(item, raw.Header, raw.Data)
}

func callOf(item work) Call {
	return Call{OpID: item.OpID, Workspace: item.Workspace, Agent: item.Agent, Tool: item.Tool}
}

// parseRequest decodes a request message into the call of item.
func parseRequest(item work, h nats.Header, body []byte) (Call, error) {
	call := callOf(item)
	ev, err := events.Decode(h, body)
	if err != nil {
		return call, events.Errorf(events.CodeRequestUnavailable, "request message %d: %v", item.RequestSeq, err)
	}
	data, err := events.DecodeData(ev)
	if err != nil {
		return call, events.Errorf(events.CodeRequestUnavailable, "request message %d: %v", item.RequestSeq, err)
	}
	req, ok := data.(*events.Request)
	if !ok || req.Validate() != nil || events.OpID(req.Fingerprint()) != item.OpID {
		return call, events.Errorf(events.CodeRequestUnavailable, "message %d is not the request of %s", item.RequestSeq, item.OpID)
	}
	call.Args = req.Args
	return call, nil
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
