package projector

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/periodic"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of OpsPurgerConfig.
const (
	// DefaultArchiveAfter is how long an ended op's events stay in the ops
	// stream after the projector applied them, at least: past it, a retry
	// is told from the archive and readers fall back on the projection,
	// each a little slower. It is short because every purge walks the
	// server's subject index of the stream, under the stream's lock, and
	// that index holds the ops of the last DefaultArchiveAfter; within the
	// ten seconds of the server's block cache, a purge also reads no
	// block back from disk (docs/performance.md, "What a purge stalls").
	DefaultArchiveAfter = 3 * time.Second
	// DefaultOpsPurgeEvery is how often the purger looks.
	DefaultOpsPurgeEvery = time.Second
	// MinArchiveAfter bounds ArchiveAfter from below.
	MinArchiveAfter = time.Second
)

// OpsPurgerConfig configures an OpsPurger.
type OpsPurgerConfig struct {
	// JetStream, Store and Projector are required: the projector must
	// read and write the archive (Config.Archive, WriteArchive).
	JetStream jetstream.JetStream
	Store     *store.Store
	Projector *Projector
	// After is how long a message stays in the ops stream after this
	// process's projector applied it, at least (DefaultArchiveAfter):
	// retries and readers within it find the op's events where they were.
	After time.Duration
	// Every is how often the purger looks (DefaultOpsPurgeEvery).
	Every time.Duration
	// Keep is how many of the ops stream's newest messages, as this
	// process's projector has applied them, a purge always leaves: the
	// stream's streams.OpsArchiveKeep, the same in every process (ADR
	// 0030). Zero: none beyond the rest of the floor.
	Keep uint64
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// OpsPurger lets ended ops leave the ops stream, and the server's subject
// index, once the archive holds them (ADR 0026): it purges the stream's op
// events below the ops floor, the lowest of
//
//   - the archive's end, as this process's projector knows it;
//   - the first event of the oldest op the projection holds as not ended
//     (store.LiveOpFloor);
//   - one past the last message this process's projector had applied
//     After ago;
//   - one past the last message it has applied, less Keep (ADR 0030):
//     a purge before an event stored at S has its floor at S-Keep or
//     below, so a projection within Keep of S holds every op that left.
//
// Rejections and records of controls and policies stay. The floor is
// stored in the archive first, unless a higher one is (archive.RaiseFloor): a retry of an op that
// left reads it (Archived.Settle). Every process may run one: each floor
// is safe on its own, since a process's projection holds every op below
// its applied sequence.
type OpsPurger struct {
	cfg     OpsPurgerConfig
	samples []applied
	purged  atomic.Uint64 // the floor of the last purge
	purges  atomic.Uint64
}

// applied is how far the projector had got at a time.
type applied struct {
	at  time.Time
	seq uint64
}

// NewOpsPurger checks cfg and returns a purger.
func NewOpsPurger(cfg OpsPurgerConfig) (*OpsPurger, error) {
	if cfg.JetStream == nil || cfg.Store == nil || cfg.Projector == nil || cfg.Projector.seg == nil {
		return nil, errors.New("ops purger: JetStream, Store and a Projector with an Archive are required")
	}
	if cfg.After == 0 {
		cfg.After = DefaultArchiveAfter
	}
	if cfg.After < MinArchiveAfter {
		return nil, errors.New("ops purger: the time ops stay after they are applied is below " + MinArchiveAfter.String())
	}
	if cfg.Every <= 0 {
		cfg.Every = DefaultOpsPurgeEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &OpsPurger{cfg: cfg}, nil
}

// Purges counts the purges made.
func (u *OpsPurger) Purges() uint64 { return u.purges.Load() }

// Floor is the floor of the last purge: every op event below it has left
// the stream.
func (u *OpsPurger) Floor() uint64 { return u.purged.Load() }

// Run purges every Every until ctx ends. A stream that denies purges (made
// by an earlier version) is left as it is, and said so once.
func (u *OpsPurger) Run(ctx context.Context) error {
	var st jetstream.Stream
	err := streams.Await(ctx, u.cfg.Logger, "the ops stream", func(ctx context.Context) error {
		var err error
		st, err = u.cfg.JetStream.Stream(ctx, streams.Ops)
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if st.CachedInfo().Config.DenyPurge {
		u.cfg.Logger.Info("ended ops stay in the ops stream: it was made by a version that denies purges (ADR 0026)", "stream", streams.Ops)
		return nil
	}
	periodic.Every(ctx, u.cfg.Every, func() { u.purge(ctx, st, time.Now()) })
	return nil
}

// purge purges below the ops floor at now, when it has risen.
func (u *OpsPurger) purge(ctx context.Context, st jetstream.Stream, now time.Time) {
	p := u.cfg.Projector
	cur := p.Applied()
	u.samples = append(u.samples, applied{at: now, seq: cur})
	// The newest sample at least After old says what may go; older ones
	// are not needed again.
	i := -1
	for j, s := range u.samples {
		if now.Sub(s.at) >= u.cfg.After {
			i = j
		}
	}
	if i < 0 {
		return
	}
	old := u.samples[i].seq
	u.samples = append(u.samples[:0], u.samples[i:]...)
	if cur+1 <= u.cfg.Keep {
		return
	}
	floor := min(old+1, p.ArchiveEnd(), cur+1-u.cfg.Keep)
	live, err := u.cfg.Store.LiveOpFloor()
	if err != nil {
		u.cfg.Logger.Warn("ops purge skipped: reading the live ops failed", "err", err)
		return
	}
	floor = min(floor, live)
	if floor <= u.purged.Load() || floor <= 1 {
		return
	}
	// The floor first: a retry whose first event is stored after the
	// purge reads it, and learns what its op may have left (Archived).
	// A higher floor stored by another process stays, and covers this
	// purge too.
	if err := u.cfg.Projector.seg.a.RaiseFloor(ctx, floor); err != nil {
		if ctx.Err() == nil {
			u.cfg.Logger.Warn("ops purge skipped: storing its floor failed; trying again", "below", floor, "err", err)
		}
		return
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(events.OpSubjects), jetstream.WithPurgeSequence(floor)); err != nil {
		if ctx.Err() == nil {
			u.cfg.Logger.Warn("ops purge failed; trying again", "below", floor, "err", err)
		}
		return
	}
	u.purged.Store(floor)
	u.purges.Add(1)
	u.cfg.Logger.Debug("archived ops purged from the ops stream", "below", floor)
}
