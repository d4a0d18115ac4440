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
	// JetStream reads work items and appends op events. Required.
	JetStream jetstream.JetStream
	// Registry holds the executors to run. Required.
	Registry *Registry
	// Workers is how many calls of one tool run at once; default 16.
	Workers int
	// ClaimTimeout is how long a claimed op may go without a heartbeat
	// before its work item is redelivered and recovery decides; default
	// 30s. Runners heartbeat every third of it while a call runs.
	ClaimTimeout time.Duration
	// RecordRetries is how often a result append is retried before the
	// runner gives up and leaves the op to recovery; default 5.
	RecordRetries int
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Validate checks the config and fills defaults.
func (c *Config) Validate() error {
	if c.JetStream == nil || c.Registry == nil {
		return errors.New("executor: JetStream and Registry are required")
	}
	if c.Workers <= 0 {
		c.Workers = 16
	}
	if c.ClaimTimeout <= 0 {
		c.ClaimTimeout = 30 * time.Second
	}
	if c.ClaimTimeout < 300*time.Millisecond {
		return fmt.Errorf("executor: ClaimTimeout %s below 300ms", c.ClaimTimeout)
	}
	if c.RecordRetries <= 0 {
		c.RecordRetries = 5
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Runner runs the registered executors over their work items.
type Runner struct {
	cfg      Config
	events   jetstream.Stream
	inflight inflight
}

// NewRunner returns a runner.
func NewRunner(cfg Config) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Runner{cfg: cfg, inflight: inflight{ops: map[string]struct{}{}}}, nil
}

// Run takes work items of every registered tool until ctx ends.
func (r *Runner) Run(ctx context.Context) error {
	js := r.cfg.JetStream
	st, err := js.Stream(ctx, streams.Events)
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	r.events = st
	g, gctx := errgroup.WithContext(ctx)
	for _, tool := range r.cfg.Registry.Tools() {
		ex, _ := r.cfg.Registry.Lookup(tool)
		cons, err := js.CreateOrUpdateConsumer(ctx, streams.Work, jetstream.ConsumerConfig{
			Durable:       streams.ExecutorConsumer(tool),
			Description:   "Airlock executor for tool " + tool,
			FilterSubject: events.ToolWorkSubjects(tool),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       r.cfg.ClaimTimeout,
			MaxDeliver:    -1,
			MaxAckPending: 4 * r.cfg.Workers,
		})
		if err != nil {
			return fmt.Errorf("executor: consumer for %s: %w", tool, err)
		}
		g.Go(func() error {
			return pull.Work(gctx, cons, r.cfg.Workers, func(ctx context.Context, m jetstream.Msg) {
				r.handle(ctx, ex, m)
			})
		})
	}
	return g.Wait()
}

// handle settles one work item.
func (r *Runner) handle(ctx context.Context, ex Executor, m jetstream.Msg) {
	var item events.WorkItem
	md, merr := m.Metadata()
	if err := json.Unmarshal(m.Data(), &item); merr != nil || err != nil || !events.ValidOpID(item.OpID) || !events.ValidName(item.Workspace) {
		r.cfg.Logger.Error("work item does not decode; dropped", "subject", m.Subject(), "err", errors.Join(merr, err))
		_ = m.Term()
		return
	}
	log := r.cfg.Logger.With("op", item.OpID, "ws", item.Workspace)
	if !r.inflight.take(item.OpID) {
		return // another copy is running here; leave this delivery alone
	}
	defer r.inflight.release(item.OpID)
	stopBeat := r.heartbeat(m)
	defer stopBeat()
	d := delivery{item: item, workSeq: md.Sequence.Stream, n: md.NumDelivered}
	switch err := r.run(ctx, ex, d, log); {
	case err == nil:
		_ = m.Ack()
	case errors.Is(err, errLeave):
		// A newer delivery of this item holds the claim: it settles it.
	case errors.Is(err, errNotClaimed):
		log.Warn("op not claimed; will retry", "err", err)
		_ = m.NakWithDelay(time.Second)
	default:
		// Claimed but not settled: leave the item unacked, so it comes
		// back after ClaimTimeout and recovery decides.
		log.Warn("op left to recovery", "err", err)
	}
}

var (
	errLeave      = errors.New("executor: a newer delivery holds the claim")
	errNotClaimed = errors.New("executor: failed before claiming")
)

// delivery is one delivery of a work item.
type delivery struct {
	item    events.WorkItem
	workSeq uint64 // the work item's sequence in AIRLOCK_WORK
	n       uint64 // its delivery count
}

// heartbeat tells JetStream the item is still in hand until stopped.
func (r *Runner) heartbeat(m jetstream.Msg) func() {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(r.cfg.ClaimTimeout / 3)
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
	return func() { close(done); <-finished }
}

// run takes the op from ready (or from a lost claim) to a terminal event.
// A nil error means the work item is settled.
func (r *Runner) run(ctx context.Context, ex Executor, d delivery, log *slog.Logger) error {
	item := d.item
	subject := events.OpSubject(item.Workspace, item.OpID)
	call, ferr := r.fetch(ctx, item)
	if ferr != nil && events.CodeOf(ferr) != events.CodeRequestUnavailable {
		return fmt.Errorf("%w: %w", errNotClaimed, ferr)
	}
	call.Attempt = nuid.Next()
	if ferr != nil {
		// The args are gone: fail the op if it is still ready.
		_, err := r.append(ctx, subject, item.ReadySeq, events.TypeFailed, &events.Failed{
			OpHeader: hdr(item), Code: events.CodeRequestUnavailable, Message: ferr.Error(),
		})
		if err != nil && !errors.Is(err, oplog.ErrConflict) {
			return fmt.Errorf("%w: %w", errNotClaimed, err)
		}
		return nil
	}
	claim := &events.Claimed{OpHeader: hdr(item), Attempt: call.Attempt, Executor: ex.Tool(), WorkSeq: d.workSeq, Delivery: d.n}
	seq, err := r.append(ctx, subject, item.ReadySeq, events.TypeClaimed, claim)
	if errors.Is(err, oplog.ErrConflict) {
		last, lerr := oplog.Last(ctx, r.events, subject)
		if lerr != nil {
			return fmt.Errorf("%w: %w", errNotClaimed, lerr)
		}
		c, ok := last.Data.(*events.Claimed)
		switch {
		case !ok:
			log.Debug("op already moved on; work item dropped", "event_type", last.Type)
			return nil
		case c.WorkSeq != d.workSeq:
			return nil // claimed through another copy of the work item
		case c.Delivery >= d.n:
			return errLeave
		}
		// An earlier delivery of this very item claimed the op and its
		// runner stopped heartbeating: that attempt is lost.
		claim.Recovers = c.Attempt
		return r.recover(ctx, ex, call, item, claim, last.Seq, log)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errNotClaimed, err)
	}
	return r.execute(ctx, ex, call, item, seq, false)
}

// recover settles an op whose attempt claim.Recovers was claimed by a runner that is
// gone, as the executor decides.
func (r *Runner) recover(ctx context.Context, ex Executor, call Call, item events.WorkItem, claim *events.Claimed, expect uint64, log *slog.Logger) error {
	subject := events.OpSubject(item.Workspace, item.OpID)
	lost := claim.Recovers
	rec, err := ex.Recover(ctx, call, lost)
	if err != nil {
		return fmt.Errorf("recover %s: %w", item.OpID, err)
	}
	log.Info("recovering lost attempt", "attempt", lost, "action", rec.Action)
	if rec.Action == Ambiguous {
		_, err := r.append(ctx, subject, expect, events.TypeAmbiguous, &events.Ambiguous{
			OpHeader: hdr(item), Attempt: lost, Code: events.CodeAmbiguous, Known: rec.Known,
		})
		if errors.Is(err, oplog.ErrConflict) {
			return nil
		}
		return err
	}
	seq, err := r.append(ctx, subject, expect, events.TypeClaimed, claim)
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
func (r *Runner) execute(ctx context.Context, ex Executor, call Call, item events.WorkItem, claimSeq uint64, recovered bool) error {
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
func (r *Runner) record(ctx context.Context, call Call, item events.WorkItem, claimSeq uint64, result json.RawMessage, xerr error, took time.Duration, recovered bool) error {
	subject := events.OpSubject(item.Workspace, item.OpID)
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
		_, err = r.append(ctx, subject, claimSeq, typ, data)
		if err == nil || errors.Is(err, oplog.ErrConflict) {
			return nil
		}
	}
	return fmt.Errorf("record %s of %s: %w", typ.Short(), item.OpID, err)
}

// outcome builds the terminal event for an execution.
func outcome(call Call, item events.WorkItem, result json.RawMessage, xerr error, took time.Duration, recovered bool) (events.Type, any) {
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
	canon, err := events.Canonical(result)
	if err != nil {
		return failed(events.CodeExecutorFailed, "result is not valid JSON: "+err.Error())
	}
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
func (r *Runner) fetch(ctx context.Context, item events.WorkItem) (Call, error) {
	call := Call{OpID: item.OpID, Workspace: item.Workspace, Agent: item.Agent, Tool: item.Tool}
	raw, err := r.events.GetMsg(ctx, item.RequestSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return call, events.Errorf(events.CodeRequestUnavailable, "request message %d is gone", item.RequestSeq)
	}
	if err != nil {
		return call, fmt.Errorf("fetch request %d: %w", item.RequestSeq, err)
	}
	ev, err := events.Decode(raw.Header, raw.Data)
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

func (r *Runner) append(ctx context.Context, subject string, expect uint64, t events.Type, data any) (uint64, error) {
	return oplog.Append(ctx, r.cfg.JetStream, r.events, subject, expect, t, Source, opIDOf(data), data)
}

func hdr(item events.WorkItem) events.OpHeader {
	return events.OpHeader{OpID: item.OpID, Workspace: item.Workspace}
}

func opIDOf(data any) string {
	h, _ := events.IsOpEvent(data)
	return h.OpID
}

// inflight is the set of ops this process is running, so two deliveries of
// one work item in hand at once do not both act.
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
