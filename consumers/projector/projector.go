package projector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/archive"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/failpoint"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// Config configures a Projector.
type Config struct {
	// JetStream is the context the projector reads with. Required.
	JetStream jetstream.JetStream
	// Store is where it applies. Required.
	Store *store.Store
	// Stream is the stream to fold; default streams.Ops.
	Stream string
	// MaxBatch bounds the messages applied in one Pebble batch; default 1024.
	MaxBatch int
	// Linger is how long a batch waits for more messages, up to MaxBatch,
	// before it is committed, when the stream is busy (the previous batch
	// was committed less than Linger ago); default 20ms, negative for
	// none. An idle stream's message is applied at once. Under load,
	// batches of a few messages each would rewrite an op's record, state
	// index and counts for each of its events; batches that span an op's
	// events write them once (see docs/performance.md).
	Linger time.Duration
	// Sync fsyncs every batch. Off, a process crash still loses nothing
	// committed; a power loss may lose recent batches, which are then
	// applied again from the stream.
	Sync bool
	// AuditKey signs the audit log's checkpoints. Without it the log's
	// leaves and hashes are still written, unsigned.
	AuditKey *audit.Key
	// Checkpoints keeps the newest checkpoint in JetStream; nil for none.
	Checkpoints *Checkpoints
	// CheckpointEvery and CheckpointInterval: a checkpoint is signed once
	// this many leaves are unsigned, or once the oldest unsigned leaf is
	// this old, whichever comes first. Defaults 1024 and 1s.
	CheckpointEvery    int
	CheckpointInterval time.Duration
	// AnchorDir, if set, is where the newest checkpoint is also written
	// (audit.CheckpointFile), at most once a CheckpointInterval and at a
	// clean stop: an anchor outside the projection.
	AnchorDir string
	// NoAuditLog writes no leaves: for benchmarks that measure what the
	// log costs, never for a deployment (serve has no flag for it).
	NoAuditLog bool
	// Observer, if set, is told every transition once it is committed
	// (metrics).
	Observer Observer
	// Archive, if set, is where the projector reads the messages the
	// stream no longer holds (ADR 0026): a gap in the stream's sequences
	// is read from its segments, in its place in the order.
	Archive *archive.Archive
	// WriteArchive stores what the projector reads in Archive, segment
	// after segment (of SegmentBytes, or after SegmentEvery; defaults
	// DefaultSegmentBytes and DefaultSegmentEvery). Several processes may:
	// each segment is stored once.
	WriteArchive bool
	SegmentBytes int
	SegmentEvery time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// idleTick bounds how long the projector goes without looking at what
// waits for it when the stream delivers nothing.
const idleTick = 250 * time.Millisecond

// DefaultLinger is Config.Linger's default.
const DefaultLinger = 20 * time.Millisecond

// MinCheckpointInterval bounds how often a checkpoint may be signed.
const MinCheckpointInterval = 10 * time.Millisecond

// EnsureDefaults fills in the defaults of what is unset.
func (c *Config) EnsureDefaults() {
	if c.Stream == "" {
		c.Stream = streams.Ops
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 1024
	}
	if c.Linger == 0 {
		c.Linger = DefaultLinger
	}
	if c.CheckpointEvery <= 0 {
		c.CheckpointEvery = 1024
	}
	if c.CheckpointInterval <= 0 {
		c.CheckpointInterval = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.SegmentBytes <= 0 {
		c.SegmentBytes = DefaultSegmentBytes
	}
	if c.SegmentEvery <= 0 {
		c.SegmentEvery = DefaultSegmentEvery
	}
}

// Validate checks the config, as EnsureDefaults left it; it changes
// nothing.
func (c *Config) Validate() error {
	if c.JetStream == nil || c.Store == nil {
		return errors.New("projector: JetStream and Store are required")
	}
	if c.WriteArchive && c.Archive == nil {
		return errors.New("projector: WriteArchive needs an Archive")
	}
	if c.CheckpointInterval < MinCheckpointInterval {
		return fmt.Errorf("projector: checkpoint interval %s is below %s", c.CheckpointInterval, MinCheckpointInterval)
	}
	return nil
}

// Projector applies the events stream to the store. Run it once; Applied and
// WaitApplied are safe to call concurrently with Run.
type Projector struct {
	cfg       Config
	applied   atomic.Uint64
	anomalies atomic.Uint64

	mu      sync.Mutex
	changed chan struct{} // closed and replaced after each commit

	// unsigned counts leaves after the newest checkpoint; since is when
	// the first of them was committed.
	unsigned int64
	since    time.Time
	anchored time.Time // when AnchorDir last got a checkpoint
	anchorAt int64     // and the size of that checkpoint
	latest   atomic.Pointer[audit.Checkpoint]
	// latestAt is when latest was signed, or when the projector started
	// (unix ns).
	latestAt atomic.Int64

	// pending holds the transitions of the batch being built, for the
	// Observer.
	pending []Transition

	// next is the sequence after the last message applied, committed or
	// not; seg is the archive's state, nil without Config.Archive; filled
	// counts the gaps read from the archive.
	next   uint64
	seg    *segments
	filled atomic.Uint64
}

// New returns a projector positioned at the store's applied sequence.
func New(cfg Config) (*Projector, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	seq, err := cfg.Store.Applied()
	if err != nil {
		return nil, fmt.Errorf("projector: %w", err)
	}
	p := &Projector{cfg: cfg, changed: make(chan struct{})}
	p.applied.Store(seq)
	if cfg.Archive != nil {
		p.seg = &segments{a: cfg.Archive, write: cfg.WriteArchive, maxBytes: cfg.SegmentBytes, every: cfg.SegmentEvery}
	}
	p.latestAt.Store(time.Now().UnixNano()) // no checkpoint yet: since start
	if err := p.loadLatest(); err != nil {
		return nil, err
	}
	return p, nil
}

// loadLatest reads the newest checkpoint and the leaves after it.
func (p *Projector) loadLatest() error {
	size, err := p.cfg.Store.LogSize()
	if err != nil {
		return fmt.Errorf("projector: %w", err)
	}
	var signed int64
	if note, err := p.cfg.Store.LatestCheckpoint(); err != nil {
		return fmt.Errorf("projector: %w", err)
	} else if note != nil && p.cfg.AuditKey != nil {
		// The start-up gate refused a checkpoint that does not verify,
		// unless overridden: then it is left as it is.
		if c, err := audit.OpenCheckpoint(note, p.cfg.AuditKey.Verifier); err == nil {
			p.latest.Store(c)
			signed = c.Size
		} else {
			p.cfg.Logger.Error("newest stored checkpoint does not verify; ignored", "err", err)
		}
	}
	if p.unsigned = size - signed; p.unsigned > 0 {
		p.since = time.Now()
	}
	return nil
}

// Latest is the newest checkpoint, nil before the first.
func (p *Projector) Latest() *audit.Checkpoint { return p.latest.Load() }

// LatestAt is when the newest checkpoint was signed; for one signed before
// this process started, or when there is none, when the projector started.
func (p *Projector) LatestAt() time.Time { return time.Unix(0, p.latestAt.Load()) }

// Applied is the stream sequence of the last committed message.
func (p *Projector) Applied() uint64 { return p.applied.Load() }

// Filled counts the gaps in the stream that were read from the archive.
func (p *Projector) Filled() uint64 { return p.filled.Load() }

// Anomalies counts op events that broke the state machine and were skipped.
func (p *Projector) Anomalies() uint64 { return p.anomalies.Load() }

// WaitApplied blocks until the projector has committed seq or ctx ends.
func (p *Projector) WaitApplied(ctx context.Context, seq uint64) error {
	for {
		p.mu.Lock()
		ch := p.changed
		p.mu.Unlock()
		if p.applied.Load() >= seq {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// CaughtUp returns once p has committed every message its stream had
// stored when it was called, or ctx ends: a CaughtUpFunc for Serve. A
// read of the stream's last sequence that fails (a leader being
// elected) is made again.
func (p *Projector) CaughtUp(ctx context.Context) error {
	for {
		st, err := p.cfg.JetStream.Stream(ctx, p.cfg.Stream)
		if err == nil {
			return p.WaitApplied(ctx, st.CachedInfo().State.LastSeq)
		}
		select {
		case <-time.After(caughtUpRetry):
		case <-ctx.Done():
			return err
		}
	}
}

// caughtUpRetry is how soon CaughtUp reads the stream again after a
// failed read.
const caughtUpRetry = 50 * time.Millisecond

// Run applies messages until ctx ends. It returns nil when ctx ends and an
// error when the store or the stream fails.
func (p *Projector) Run(ctx context.Context) error {
	wait := 100 * time.Millisecond
	for {
		err := p.run(ctx)
		var re *readError
		if !errors.As(err, &re) || ctx.Err() != nil {
			return err
		}
		// The stream could not be read (its leader lost, an ordered
		// consumer that could not be made again): read again from the
		// last applied message.
		p.cfg.Logger.Warn("projector: reading the stream failed; reading again", "applied", p.applied.Load(), "err", re.err)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return p.finalCheckpoint(ctx)
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// readError is a failure to read the stream, after which Run reads again.
type readError struct{ err error }

func (e *readError) Error() string { return "projector: read: " + e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

func (p *Projector) run(ctx context.Context) error {
	// Requests live in their own stream: they are folded through the op's
	// first event, which carries their digest, so the projector never
	// reads argument plaintext.
	p.next = p.applied.Load() + 1
	start := p.next
	if s := p.seg; s != nil {
		s.msgs, s.bytes = s.msgs[:0], 0
		if err := streams.Await(ctx, p.cfg.Logger, "the archive's end", s.tail); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("projector: %w", err)
		}
		if s.write && s.end < start {
			// Read again what is not in a segment yet, to store it.
			start = s.end
		}
	}
	cc := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if start > 1 {
		cc.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cc.OptStartSeq = start
	}
	var cons jetstream.Consumer
	err := streams.Await(ctx, p.cfg.Logger, "the projector's consumer", func(ctx context.Context) error {
		var err error
		cons, err = p.cfg.JetStream.OrderedConsumer(ctx, p.cfg.Stream, cc)
		return err
	})
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("projector: consumer: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(2*p.cfg.MaxBatch), jetstream.PullExpiry(streams.PullExpiry))
	if err != nil {
		return fmt.Errorf("projector: messages: %w", err)
	}
	msgs := make(chan jetstream.Msg, p.cfg.MaxBatch)
	readErr := make(chan error, 1)
	go func() {
		defer close(msgs)
		for {
			m, err := it.Next()
			if err != nil {
				if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					readErr <- err
				}
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer func() {
		it.Stop()
		for range msgs { // let the reader exit
		}
	}()

	// A leftover checkpoint from before a crash is published first, so
	// JetStream catches up with the store.
	if err := p.publishLatest(ctx); err != nil {
		return err
	}
	// Idle checkpoints, segments and the archive's tail (fillIdle) are
	// looked at on every tick.
	tick := time.NewTicker(min(p.cfg.CheckpointInterval/4, idleTick))
	defer tick.Stop()
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	var lastCommit time.Time // busy: committed less than Linger ago
	// carry is a message read after a gap, to apply once the gap is read
	// from the archive.
	var carry jetstream.Msg
	for {
		var m jetstream.Msg
		var ok bool
		if carry != nil {
			m, ok, carry = carry, true, nil
		} else {
			select {
			case m, ok = <-msgs:
			case <-tick.C:
				if p.seg != nil && p.seg.due() {
					p.flush(ctx)
				}
				if err := p.fillIdle(ctx); err != nil {
					return err
				}
				if err := p.idleCheckpoint(ctx); err != nil {
					return err
				}
				continue
			case <-ctx.Done():
				return p.stop(ctx)
			}
		}
		if !ok {
			select {
			case err := <-readErr:
				return &readError{err}
			default:
			}
			if ctx.Err() != nil {
				// The reader stopped because the projector is stopping:
				// a clean stop signs the tail all the same.
				return p.stop(ctx)
			}
			return nil
		}
		if p.gap(m) {
			if err := p.fillBefore(ctx, m); err != nil {
				return err
			}
		}
		b := p.cfg.Store.NewBatch()
		n, leaves := 0, int64(0)
		// A busy stream's batch lingers once, for at most Linger.
		busy := p.cfg.Linger > 0 && time.Since(lastCommit) < p.cfg.Linger
		lingering := false
		for {
			am, err := asMsg(m)
			before := p.next
			if err == nil {
				err = p.apply(b, am)
			}
			if p.next != before {
				leaves++
			}
			if err != nil {
				b.Abort()
				p.pending = p.pending[:0]
				return err
			}
			if p.seg != nil {
				p.seg.add(am)
			}
			n++
			if n >= p.cfg.MaxBatch {
				break
			}
			if len(msgs) > 0 {
				if m = <-msgs; p.gap(m) {
					carry = m
					break
				}
				continue
			}
			if !busy {
				break
			}
			if !lingering {
				linger.Reset(p.cfg.Linger)
				lingering = true
			}
			var more bool
			select {
			case m, more = <-msgs:
				if more && p.gap(m) {
					carry, more = m, false
				}
			case <-linger.C:
				lingering, busy = false, false
			case <-ctx.Done():
			}
			if !more {
				break // the linger ran out, or the reader stopped: commit what there is
			}
		}
		if lingering {
			linger.Stop() // no stale tick is delivered after Stop (Go 1.23)
		}
		if err := p.commit(ctx, b, leaves, false); err != nil {
			return err
		}
		lastCommit = time.Now()
		if p.seg != nil && p.seg.due() {
			p.flush(ctx)
		}
	}
}

// stop ends a clean stop: what is kept for the archive is stored, and
// the tail of the log signed.
func (p *Projector) stop(ctx context.Context) error {
	if p.seg != nil && len(p.seg.msgs) > 0 {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		p.flush(fctx)
		cancel()
	}
	return p.finalCheckpoint(ctx)
}

// commit writes a batch that added leaves leaves, with a checkpoint when
// one is due (or, with sign, whenever leaves are unsigned), and publishes
// the checkpoint.
func (p *Projector) commit(ctx context.Context, b *store.Batch, leaves int64, sign bool) error {
	if p.unsigned == 0 && leaves > 0 {
		p.since = time.Now()
	}
	p.unsigned += leaves
	due := p.cfg.AuditKey != nil && p.unsigned > 0 &&
		(sign || p.unsigned >= int64(p.cfg.CheckpointEvery) || time.Since(p.since) >= p.cfg.CheckpointInterval)
	var cp *audit.Checkpoint
	if due {
		var err error
		if cp, err = b.Checkpoint(p.cfg.AuditKey); err != nil {
			b.Abort()
			return fmt.Errorf("projector: %w", err)
		}
	}
	failpoint.Hit(failpoint.AuditBeforeCommit, "")
	// A batch with a checkpoint is synced: the checkpoint goes to
	// JetStream next, and must not outlive the leaves it signs.
	if err := b.Commit(p.cfg.Sync || cp != nil); err != nil {
		p.pending = p.pending[:0]
		return fmt.Errorf("projector: commit: %w", err)
	}
	// The counts first: whoever sees the applied sequence move (a scrape
	// that finds no lag, WaitApplied) then sees them too.
	p.flushObserved()
	p.committed(b)
	if p.cfg.Checkpoints != nil && leaves > 0 && p.cfg.Checkpoints.Waiting() {
		// The deployment's newest checkpoint, once this log reaches it.
		size, err := p.cfg.Store.LogSize()
		if err == nil {
			err = p.cfg.Checkpoints.CheckAhead(size, p.cfg.Store)
		}
		if err != nil {
			return fmt.Errorf("projector: %w", err)
		}
	}
	if cp == nil {
		failpoint.Hit(failpoint.AuditAfterCommit, "")
		return nil
	}
	p.unsigned = 0
	p.latest.Store(cp)
	p.latestAt.Store(time.Now().UnixNano())
	if p.cfg.AnchorDir != "" && (sign || time.Since(p.anchored) >= p.cfg.CheckpointInterval) {
		// After the synced commit: the file never covers leaves the
		// projection could lose.
		if err := p.anchor(cp); err != nil {
			return err
		}
	}
	failpoint.Hit(failpoint.AuditAfterCheckpoint, "")
	if err := p.publishLatest(ctx); err != nil {
		return err
	}
	failpoint.Hit(failpoint.AuditAfterPublish, "")
	return nil
}

// idleCheckpoint signs the leaves that wait when no message came to carry
// a checkpoint within the interval.
func (p *Projector) idleCheckpoint(ctx context.Context) error {
	if p.cfg.AuditKey == nil || p.unsigned == 0 || time.Since(p.since) < p.cfg.CheckpointInterval {
		return p.publishLatest(ctx) // one that failed to publish before
	}
	return p.commit(ctx, p.cfg.Store.NewBatch(), 0, false)
}

// finalCheckpoint signs the leaves still unsigned when the projector
// stops cleanly, so that a stopped log is fully signed.
func (p *Projector) finalCheckpoint(ctx context.Context) error {
	if p.cfg.AuditKey == nil {
		return nil
	}
	if p.unsigned == 0 {
		// Signed already; the file may be a checkpoint interval behind.
		if cp := p.latest.Load(); cp != nil && p.cfg.AnchorDir != "" && cp.Size > p.anchorAt {
			return p.anchor(cp)
		}
		return nil
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := p.commit(fctx, p.cfg.Store.NewBatch(), 0, true); err != nil {
		if p.unsigned != 0 {
			return err // not even stored
		}
		// Stored, not in JetStream: the next start publishes it.
		p.cfg.Logger.Warn("final checkpoint not published", "err", err)
	}
	return nil
}

// anchor writes cp to the checkpoint file in AnchorDir.
func (p *Projector) anchor(cp *audit.Checkpoint) error {
	if err := audit.WriteCheckpointFile(p.cfg.AnchorDir, cp.Note); err != nil {
		return fmt.Errorf("projector: %w", err)
	}
	p.anchored, p.anchorAt = time.Now(), cp.Size
	return nil
}

// publishLatest puts the newest checkpoint into JetStream.
func (p *Projector) publishLatest(ctx context.Context) error {
	cp := p.latest.Load()
	if cp == nil || p.cfg.Checkpoints == nil || p.cfg.Checkpoints.Has(cp) {
		return nil
	}
	if err := p.cfg.Checkpoints.Publish(ctx, cp, p.cfg.Store); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrCheckpointConflict) {
			return fmt.Errorf("projector: %w", err)
		}
		// Stored in Pebble already: the next checkpoint or tick tries
		// again (Has stays false).
		p.cfg.Logger.Warn("checkpoint not published to JetStream; retrying later", "size", cp.Size, "err", err)
	}
	return nil
}

func (p *Projector) committed(b *store.Batch) {
	if seq := b.AppliedSeq(); seq != 0 { // a checkpoint-only batch applies nothing
		p.applied.Store(seq)
	}
	p.mu.Lock()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// apply folds one message into b. Only store failures are errors: a message
// that does not decode or breaks the state machine is logged, counted and
// passed over, since the stream is the record and the gate already refused
// bad requests.
func (p *Projector) apply(b *store.Batch, m archive.Msg) error {
	seq := m.Seq
	if seq < p.next || seq <= p.applied.Load() {
		return nil // already applied
	}
	p.next = seq + 1
	b.SetApplied(seq)
	hdr := m.Header
	typ, _, data, err := events.DecodeStored(hdr, m.Data)
	// Every message becomes a leaf, one that breaks the rules too: the
	// log records what the stream holds.
	if err != nil {
		typ = events.Type(hdr.Get(events.HeaderPrefix + "type"))
	}
	at := m.Time
	if !p.cfg.NoAuditLog {
		leaf := audit.NewLeaf(p.cfg.Stream, m.Subject, seq, at, typ,
			hdr.Get(events.HeaderPrefix+"id"), hdr.Get(events.HeaderPrefix+"source"), hdr.Get(events.HeaderPrefix+"time"), m.Data, data)
		if err := b.AppendLeaf(leaf.Encode(), leaf.Op); err != nil {
			return fmt.Errorf("projector: seq %d: %w", seq, err)
		}
	}
	if typ == events.TypeRejected {
		if r, ok := data.(*events.Rejected); ok && err == nil {
			p.observe(Transition{Type: typ, Data: r, At: at.UTC()})
		}
		return nil // recorded in the stream; no op to fold
	}
	if err != nil {
		p.anomalies.Add(1)
		p.cfg.Logger.Warn("op event does not decode; skipped", "subject", m.Subject, "seq", seq, "err", err)
		return nil
	}
	h, isOp := events.IsOpEvent(data)
	if !isOp {
		p.observe(Transition{Type: typ, Data: data, At: at.UTC()})
		return nil
	}
	ws, op, tool, verb, ok := events.OpSubjectParts(m.Subject)
	if !ok || ws != h.Workspace || op != h.OpID || verb != typ.Short() {
		p.anomalies.Add(1)
		p.cfg.Logger.Warn("op event on another op's subject; skipped",
			"op", h.OpID, "ws", h.Workspace, "subject", m.Subject, "seq", seq)
		return nil
	}
	// The server checked an expected last sequence of 0 over every event of
	// this op: this is its first event, so the op cannot exist yet, unless
	// it was archived (ADR 0026) and left the stream before this retry.
	first := typ.First() && hdr.Get(jetstream.ExpectedLastSubjSeqHeader) == "0" &&
		hdr.Get(jetstream.ExpectedLastSubjSeqSubjHeader) == events.OpFilter(ws, op)
	// With an archive, the op may be one that ended and left: the filter
	// of ended ops says when it is surely not, without a read.
	rec, err := b.Op(h.OpID, first && (p.seg == nil || !p.cfg.Store.MaybeEnded(h.OpID)))
	if err != nil {
		return fmt.Errorf("projector: seq %d: %w", seq, err)
	}
	if (first && rec.State != events.StateNew) || hdr.Get(events.HeaderRestates) != "" {
		// A retry of an archived op, and the outcome stated again to end
		// it: the op is what the archive says. Only the sequence the
		// next transition must expect moves.
		if rec.State != events.StateNew {
			rec.Version = seq
		}
		p.cfg.Logger.Debug("archived op stated again", "op", h.OpID, "event_type", typ, "seq", seq)
		return nil
	}
	if rec.State != events.StateNew && rec.Tool != "" && tool != rec.Tool {
		p.anomalies.Add(1)
		p.cfg.Logger.Warn("op event names another tool; skipped", "op", h.OpID, "ws", h.Workspace, "subject", m.Subject, "seq", seq)
		return nil
	}
	from, since := rec.State, rec.UpdatedAt
	if err := rec.Apply(data, seq, at.UTC()); err != nil {
		p.anomalies.Add(1)
		p.cfg.Logger.Warn("op event breaks the state machine; skipped",
			"op", h.OpID, "ws", h.Workspace, "event_type", typ, "seq", seq, "err", err)
		return nil
	}
	if p.cfg.Observer != nil {
		p.observe(transition(typ, data, from, since, rec))
	}
	return nil
}
