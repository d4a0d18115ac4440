package projector

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/results"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// EraserSource is the ce-source of the result_erased events the eraser
// and the result endpoint write.
const EraserSource = "airlock/eraser"

// EraserConfig configures an Eraser.
type EraserConfig struct {
	// JetStream appends result_erased events. Required.
	JetStream jetstream.JetStream
	// Store is the projection whose results index it reads. Required.
	Store *store.Store
	// Results erases the sealed results. Required.
	Results *results.Store
	// RetainedBytes bounds the result bytes one workspace keeps; over it
	// the results erased soonest go first (ErasedEvicted). Default
	// events.DefaultRetainedBytes; negative: no bound.
	RetainedBytes int64
	// Interval between sweeps; default DefaultExpiryInterval.
	Interval time.Duration
	// Clock tells the time; default time.Now.
	Clock func() time.Time
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Eraser erases kept results whose retention ended, and the oldest of a
// workspace over its byte bound: it removes the sealed result from
// AIRLOCK_RESULTS, then appends result_erased to the op with
// compare-and-swap. Several erasers (one per process) are safe together:
// erasing is idempotent and only one event lands.
type Eraser struct {
	cfg     EraserConfig
	w       *oplog.Writer // its own, closed when Run returns
	evicted atomic.Uint64
	expired atomic.Uint64
}

// NewEraser returns an eraser.
func NewEraser(cfg EraserConfig) (*Eraser, error) {
	if cfg.JetStream == nil || cfg.Store == nil || cfg.Results == nil {
		return nil, errors.New("projector: eraser: JetStream, Store and Results are required")
	}
	if cfg.RetainedBytes == 0 {
		cfg.RetainedBytes = events.DefaultRetainedBytes
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultExpiryInterval
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w, err := oplog.NewWriter(cfg.JetStream)
	if err != nil {
		return nil, fmt.Errorf("projector: eraser: %w", err)
	}
	return &Eraser{cfg: cfg, w: w}, nil
}

// Evicted counts the results this eraser erased because their workspace
// kept too many bytes; Expired those whose retention ended.
func (e *Eraser) Evicted() uint64 { return e.evicted.Load() }

// Expired counts the results whose retention ended that this eraser
// erased.
func (e *Eraser) Expired() uint64 { return e.expired.Load() }

// Run sweeps until ctx ends.
func (e *Eraser) Run(ctx context.Context) error {
	return sweeps(ctx, e.w, e.cfg.Logger, e.cfg.Interval, "result erasure sweep", e.Sweep)
}

// sweepBatch bounds the results one sweep erases for each reason.
const sweepBatch = 256

// Sweep erases what is due and returns how many results it erased. A
// result whose erasure fails does not stop the others: the first error is
// returned once the sweep is done, and the next sweep tries it again.
func (e *Eraser) Sweep(ctx context.Context, st jetstream.Stream) (int, error) {
	due, err := e.cfg.Store.KeptResults("", e.cfg.Clock(), sweepBatch)
	if err != nil {
		return 0, err
	}
	n := 0
	var first error
	for _, k := range due {
		ok, err := EraseResult(ctx, e.w, st, e.cfg.Store, e.cfg.Results, k.OpID, events.ErasedExpired)
		if err != nil {
			first = cmp.Or(first, err)
			continue
		}
		if ok {
			n++
			e.expired.Add(1)
		}
	}
	if e.cfg.RetainedBytes < 0 {
		return n, first
	}
	kept, err := e.cfg.Store.Retained()
	if err != nil {
		return n, cmp.Or(first, err)
	}
	for ws, bytes := range kept {
		over := bytes - e.cfg.RetainedBytes
		if over <= 0 {
			continue
		}
		oldest, err := e.cfg.Store.OldestResults(ws, sweepBatch)
		if err != nil {
			first = cmp.Or(first, err)
			continue
		}
		for _, k := range oldest {
			if over <= 0 {
				break
			}
			// Counted as freed whether this eraser or another lands the
			// event: the projection takes the bytes off once it folds it.
			over -= max(k.Bytes, 1)
			ok, err := EraseResult(ctx, e.w, st, e.cfg.Store, e.cfg.Results, k.OpID, events.ErasedEvicted)
			if err != nil {
				first = cmp.Or(first, err)
				continue
			}
			if ok {
				n++
				e.evicted.Add(1)
				e.cfg.Logger.Warn("result erased early: the workspace keeps too many result bytes (serve --result-retain-bytes)",
					"op", k.OpID, "ws", ws, "bytes", k.Bytes, "kept_until", k.Until)
			}
		}
	}
	return n, first
}

// EraseResult erases op's kept result and records why: the sealed result
// goes first, then result_erased is appended with compare-and-swap on the
// op as the projection holds it. It reports whether its event landed; an
// op whose result is not kept (any more), or that changed meanwhile, is
// left alone (false, nil).
func EraseResult(ctx context.Context, w *oplog.Writer, ops jetstream.Stream, st *store.Store, rs *results.Store, opID, reason string) (bool, error) {
	op, err := st.Op(opID)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if op.State != events.StateCompleted || op.ResultKeptUntil == nil || op.ResultErased != "" {
		return false, nil
	}
	if err := rs.Erase(ctx, op.Workspace, op.ID, op.Attempt, op.ResultSeq); err != nil {
		return false, err
	}
	ev := &events.ResultErased{
		OpHeader: events.OpHeader{OpID: op.ID, Workspace: op.Workspace},
		Reason:   reason, ResultDigest: op.ResultDigest, ResultBytes: op.ResultBytes,
	}
	to := oplog.Op{Workspace: op.Workspace, ID: op.ID, Tool: op.Tool}
	_, err = w.Append(ctx, ops, to, op.Version, events.TypeResultErased, EraserSource, ev)
	if oplog.IsConflict(err) {
		// Erased by another process, or the op's events left the stream
		// for the archive (ADR 0026) since the projection read them: then
		// the erasure goes after what the stream holds of the op now.
		expect, ok := afterArchived(ctx, ops, op)
		if !ok {
			return false, nil
		}
		if _, err = w.Append(ctx, ops, to, expect, events.TypeResultErased, EraserSource, ev); oplog.IsConflict(err) {
			return false, nil
		}
	}
	return err == nil, err
}

// afterArchived is what an erasure of op's result must expect when the ops
// stream no longer holds op's events, or holds only a retry ended with
// its archived outcome (events.HeaderRestates): 0, or that outcome's
// sequence. ok is false when the stream holds the op's own newest event,
// an erasure among them: nothing is left to do.
func afterArchived(ctx context.Context, ops jetstream.Stream, op *events.Op) (expect uint64, ok bool) {
	last, err := oplog.Last(ctx, ops, op.Workspace, op.ID)
	switch {
	case errors.Is(err, oplog.ErrEmpty):
		return 0, true
	case err != nil:
		return 0, false
	case last.Type == events.TypeResultErased:
		return 0, false
	case last.Header.Get(events.HeaderRestates) != "":
		return last.Seq, true
	}
	return 0, false
}

// resultEndpoint answers events.ResultQuery on events.ResultQuerySubjects.
type resultEndpoint struct {
	nc  *nats.Conn
	w   *oplog.Writer
	st  *store.Store
	rs  *results.Store
	js  jetstream.JetStream
	ops atomic.Pointer[jetstream.Stream]
}

// resultTimeout bounds one answer of the result endpoint.
const resultTimeout = 5 * time.Second

func (q *resultEndpoint) handle(req micro.Request) {
	ctx, cancel := context.WithTimeout(context.Background(), resultTimeout)
	defer cancel()
	asker := req.Subject()[len(events.ResultQuerySubject("")):]
	var in events.ResultQuery
	if err := json.Unmarshal(req.Data(), &in); err != nil || !events.ValidOpID(in.OpID) {
		respondError(req, events.Errorf(events.CodeInvalidQuery, "want {\"op_id\": \"op_<32 hex>\"[, \"reply_to\": \"airlock.v1.reply.<agent>.<token>\"][, \"delivered\": true]}"))
		return
	}
	op, err := q.st.Op(in.OpID)
	if errors.Is(err, store.ErrNotFound) {
		respondError(req, &events.Error{Code: events.CodeNotFound, Message: "no op " + in.OpID + " (yet): check the id, or ask again once the op is stored", Retryable: true})
		return
	}
	if err != nil {
		respondError(req, events.Errorf(events.CodeInternal, "%v", err))
		return
	}
	if op.Agent != asker {
		// Only the agent that asked gets the bytes; everyone who may
		// read the op gets what the log says of them.
		respondError(req, events.Errorf(events.CodeNotRequester,
			"op %s was requested by another agent, not %s: only the requesting agent gets its result; its digest is %s (%d bytes), in ops get",
			op.ID, asker, orNone(op.ResultDigest), op.ResultBytes))
		return
	}
	if op.State != events.StateCompleted {
		respondError(req, &events.Error{Code: events.CodeNotCompleted,
			Message:   "op " + op.ID + " is " + string(op.State) + ": only a completed op has a result" + notYet(op.State),
			Retryable: !op.State.Terminal()})
		return
	}
	ans := events.ResultAnswer{
		OpID: op.ID, Workspace: op.Workspace, State: op.State, ResultDigest: op.ResultDigest, ResultBytes: op.ResultBytes,
		KeptUntil: op.ResultKeptUntil, EraseOnDelivery: op.ResultEraseOnDelivery,
	}
	switch {
	case op.ResultKeptUntil == nil:
		respondError(req, events.Errorf(events.CodeResultNotKept,
			"the result of %s was not kept (its policy keeps none, or it completed before results were kept): its digest is %s (%d bytes)",
			op.ID, op.ResultDigest, op.ResultBytes))
		return
	case op.ResultErased != "":
		respondError(req, expiredError(op, op.ResultErased))
		return
	case !time.Now().Before(*op.ResultKeptUntil):
		// The eraser has not got to it yet: its retention has ended all
		// the same.
		respondError(req, expiredError(op, events.ErasedExpired))
		return
	}
	if in.Delivered {
		if op.ResultEraseOnDelivery {
			if err := q.eraseDelivered(ctx, op); err != nil {
				respondError(req, &events.Error{Code: events.CodeUnavailable, Message: "erase delivered result: " + err.Error(), Retryable: true})
				return
			}
			ans.Erased = true
		}
		respond(req, ans)
		return
	}
	sealed, err := q.rs.Get(ctx, op.Workspace, op.ID, op.Attempt, op.ResultSeq)
	if errors.Is(err, results.ErrGone) {
		respondError(req, expiredError(op, events.ErasedExpired))
		return
	}
	if err != nil {
		respondError(req, &events.Error{Code: events.CodeUnavailable, Message: err.Error(), Retryable: true})
		return
	}
	plain, ok, err := q.rs.Open(op.ID, sealed)
	if err != nil {
		respondError(req, events.Errorf(events.CodeResultMismatch, "the stored result of %s does not open: it was changed; its digest is %s (%d bytes)", op.ID, op.ResultDigest, op.ResultBytes))
		return
	}
	if in.ReplyTo == "" {
		// The answer to a request goes to an inbox any client principal
		// may subscribe to: it says the result is there, not what it is.
		respond(req, ans)
		return
	}
	if !events.ValidReplyTo(in.ReplyTo, asker) {
		respondError(req, events.Errorf(events.CodeInvalidQuery,
			"reply_to must be one of %s's reply subjects, %s<token>..., which only it may subscribe to: a result goes nowhere else", asker, events.ReplyPrefix(asker)))
		return
	}
	full := ans
	if ok {
		full.Result = plain
	} else {
		full.Sealed = sealed
	}
	body, err := events.MarshalJSON(full)
	if err == nil {
		err = q.nc.Publish(in.ReplyTo, body)
	}
	if err != nil {
		respondError(req, &events.Error{Code: events.CodeUnavailable, Message: "send the result: " + err.Error(), Retryable: true})
		return
	}
	ans.SentTo = in.ReplyTo
	respond(req, ans)
}

func (q *resultEndpoint) eraseDelivered(ctx context.Context, op *events.Op) error {
	st := q.ops.Load()
	if st == nil {
		s, err := q.js.Stream(ctx, streams.Ops)
		if err != nil {
			return err
		}
		q.ops.Store(&s)
		st = &s
	}
	_, err := EraseResult(ctx, q.w, *st, q.st, q.rs, op.ID, events.ErasedDelivered)
	return err
}

func expiredError(op *events.Op, why string) *events.Error {
	return events.Errorf(events.CodeResultExpired,
		"the result of %s is no longer kept (%s); its digest is %s (%d bytes): run the call again (a new idempotency key) if you need its output",
		op.ID, why, op.ResultDigest, op.ResultBytes)
}

func orNone(s string) string {
	if s == "" {
		return "none yet"
	}
	return s
}

func notYet(s events.State) string {
	if s.Terminal() {
		return ""
	}
	return "; ask again once it completes"
}

// ServeResults adds the result endpoint (events.ResultQuerySubjects) to
// the query service svc: a principal asks on its own subject, and only
// the agent that requested an op gets its result, published on nc to
// one of that agent's reply subjects.
func ServeResults(svc micro.Service, nc *nats.Conn, st *store.Store, rs *results.Store, js jetstream.JetStream) error {
	w, err := oplog.NewWriter(js)
	if err != nil {
		return err
	}
	// The writer lives as long as the connection: the service has no
	// stop of its own to close it at.
	q := &resultEndpoint{nc: nc, w: w, st: st, rs: rs, js: js}
	return svc.AddEndpoint("result", micro.HandlerFunc(q.handle), micro.WithEndpointSubject(events.ResultQuerySubjects))
}
