package projector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultScrubInterval is how often the scrubber looks for terminal ops
// whose request is still stored.
const DefaultScrubInterval = 250 * time.Millisecond

// DefaultScrubWorkers bounds the erasures in flight at once. JetStream
// erases a message by writing its whole block again (up to 8 MiB) and
// fsyncing it, holding the stream's lock: erasures in parallel do not go
// faster, and they keep the gate from storing requests meanwhile. One at a
// time leaves the stream to the pipeline between two erasures.
const DefaultScrubWorkers = 1

// DefaultSecureBacklog is the backlog above which a sweep deletes instead
// of erasing: under load a secure delete per op (a block written again
// per op) cannot keep up and stalls the requests stream, while blocks
// fill, and so leave the disk, within seconds. See ADR 0010.
const DefaultSecureBacklog = 16

// DefaultPurgeEvery bounds how often a sweep purges AIRLOCK_REQUESTS: a
// purge also rewrites the block state, and under load a page of the index
// fills faster than that.
const DefaultPurgeEvery = 50 * time.Millisecond

// DefaultPurgeGrace is how long an ended op's request above the purge
// floor waits for a later purge before it is deleted on its own: about
// the time the ops in flight below it take to end under load.
const DefaultPurgeGrace = time.Second

// DefaultHeldCheckEvery is how often a scrubber looks through AIRLOCK_HELD
// for copies of ops that have ended (CheckHeld), besides once when it
// starts: twice the gate's time-out for a request's batch (15 s), within
// which a move of a request on its way lands, so that a copy that lands
// after its op ended and was scrubbed stays at most about a minute.
const DefaultHeldCheckEvery = 30 * time.Second

// heldChecksPerPass bounds the copies one of Run's passes of CheckHeld
// erases, one secure delete each; the rest wait for the next pass, after
// the next sweep. heldCheckRetry is how soon a pass that failed is tried
// again.
const (
	heldChecksPerPass = 256
	heldCheckRetry    = time.Minute
)

// deleteWorkers bounds plain deletes in flight: each is a small tombstone.
const deleteWorkers = 8

// scrubPage is how many index entries one round of a sweep takes.
const scrubPage = 256

// ScrubberConfig configures a Scrubber.
type ScrubberConfig struct {
	// JetStream erases request messages. Required.
	JetStream jetstream.JetStream
	// Store is the projection whose scrub index it works through.
	// Required.
	Store *store.Store
	// Interval between sweeps; default DefaultScrubInterval.
	Interval time.Duration
	// Workers bounds the erasures in flight; default DefaultScrubWorkers.
	Workers int
	// SecureBacklog: a sweep that finds more requests to erase than this
	// deletes them (oplog.DeleteRequest) instead of erasing them with a
	// secure delete each; default DefaultSecureBacklog, -1 to always
	// erase securely.
	SecureBacklog int
	// PurgeEvery bounds how often a sweep purges; default
	// DefaultPurgeEvery (a purge that did not raise the floor is tried
	// again only after PurgeGrace). PurgeGrace is how long after its op
	// ended a request above the purge floor waits for a later purge
	// before it is deleted on its own; default DefaultPurgeGrace.
	PurgeEvery, PurgeGrace time.Duration
	// HeldCheckEvery is how often Run calls CheckHeld, which it also
	// calls when it starts; default DefaultHeldCheckEvery.
	HeldCheckEvery time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Scrubber erases argument plaintext once nothing needs it: for every op
// the projection has seen reach a terminal state (the store's scrub
// index, written in the batch that applied the transition), it erases the
// op's request message from AIRLOCK_REQUESTS with JetStream's secure
// delete, and only then drops the index entry. A crash in between erases
// again, which finds the message gone and counts it done. Ops that are not
// terminal are never indexed: an executor still reads a ready op's args,
// and an approver a held op's. Several scrubbers (one per process, each
// with its own projection) are safe together.
type Scrubber struct {
	cfg     ScrubberConfig
	erased  atomic.Uint64
	deleted atomic.Uint64
	held    jetstream.Stream // AIRLOCK_HELD, opened when first needed (one sweep at a time)
	purges  atomic.Uint64
	// after is the scrub index key the sweeps have settled everything up
	// to (nil: from the start); floor the highest purge floor so far (a
	// floor stays safe: no request below it is needed again), and
	// nextPurge when a purge may be tried again.
	after     []byte
	floor     uint64
	nextPurge time.Time
}

// NewScrubber returns a scrubber.
func NewScrubber(cfg ScrubberConfig) (*Scrubber, error) {
	if cfg.JetStream == nil || cfg.Store == nil {
		return nil, errors.New("projector: scrubber: JetStream and Store are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultScrubInterval
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultScrubWorkers
	}
	if cfg.HeldCheckEvery <= 0 {
		cfg.HeldCheckEvery = DefaultHeldCheckEvery
	}
	if cfg.SecureBacklog == 0 {
		cfg.SecureBacklog = DefaultSecureBacklog
	}
	if cfg.PurgeEvery <= 0 {
		cfg.PurgeEvery = DefaultPurgeEvery
	}
	if cfg.PurgeGrace <= 0 {
		cfg.PurgeGrace = DefaultPurgeGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Scrubber{cfg: cfg}, nil
}

// Erased counts the index entries this scrubber has settled.
func (s *Scrubber) Erased() uint64 { return s.erased.Load() }

// Deleted counts those of them settled with a plain delete under load
// rather than a secure delete.
func (s *Scrubber) Deleted() uint64 { return s.deleted.Load() }

// Purges counts the purges of AIRLOCK_REQUESTS the sweeps made.
func (s *Scrubber) Purges() uint64 { return s.purges.Load() }

// Run indexes the terminal ops of a store written before the scrub index
// existed, then sweeps until ctx ends.
func (s *Scrubber) Run(ctx context.Context) error {
	st, err := streams.Open(ctx, s.cfg.JetStream, s.cfg.Logger, streams.Requests)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return err
	}
	n, err := s.cfg.Store.IndexScrubs(ctx)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return err
	}
	if n > 0 {
		s.cfg.Logger.Info("terminal ops indexed for scrubbing", "ops", n)
	}
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	nextCheck := time.Now()
	for {
		if n, err := s.Sweep(ctx, st); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("request scrub", "err", err, "erased", n)
		}
		if !time.Now().Before(nextCheck) {
			n, more, err := s.checkHeld(ctx, heldChecksPerPass)
			if ctx.Err() != nil {
				return nil
			}
			if n > 0 {
				s.cfg.Logger.Info("held requests of ended ops erased", "copies", n)
			}
			switch {
			case err != nil:
				// Not reachable yet, say, at start: soon again, not in
				// HeldCheckEvery.
				s.cfg.Logger.Warn("held requests of ended ops", "err", err, "erased", n)
				nextCheck = time.Now().Add(min(s.cfg.HeldCheckEvery, heldCheckRetry))
			case more:
				// The rest after the next sweep: the sweeps of
				// AIRLOCK_REQUESTS do not wait behind a long backlog.
				nextCheck = time.Now()
			default:
				nextCheck = time.Now().Add(s.cfg.HeldCheckEvery)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// CheckHeld erases every copy in AIRLOCK_HELD whose op the projection has
// seen end, and returns how many it erased. The sweeps erase a held op's
// copy when its op ends; a move of the request that lands after that (held
// up by an election, or by an erase holding AIRLOCK_HELD), or a copy a
// process stopped before erasing, stays until CheckHeld finds it: Run
// calls it when the scrubber starts and every HeldCheckEvery. A copy of an
// op the projection does not have yet, or that has not ended, is left.
func (s *Scrubber) CheckHeld(ctx context.Context) (int, error) {
	n, _, err := s.checkHeld(ctx, -1)
	return n, err
}

// checkHeld is CheckHeld erasing at most limit copies (-1: no limit);
// more says it stopped there with copies left to look at.
func (s *Scrubber) checkHeld(ctx context.Context, limit int) (n int, more bool, err error) {
	held, err := s.openHeld(ctx)
	if err != nil {
		return 0, false, err
	}
	info, err := held.Info(ctx, jetstream.WithSubjectFilter(events.HeldSubjects))
	if err != nil {
		return 0, false, fmt.Errorf("scrub: list %s: %w", streams.Held, err)
	}
	prefix := strings.TrimSuffix(events.HeldSubjects, ">")
	var failed error
	for subject := range info.State.Subjects {
		if err := ctx.Err(); err != nil {
			return n, true, err
		}
		if limit >= 0 && n >= limit {
			return n, true, failed
		}
		id, ok := strings.CutPrefix(subject, prefix)
		if !ok {
			continue
		}
		op, err := s.cfg.Store.Op(id)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			failed = fmt.Errorf("scrub: op %s: %w", id, err)
			continue
		}
		if !op.State.Terminal() {
			continue
		}
		found, err := oplog.EraseHeld(ctx, held, id)
		if err != nil {
			failed = err
			continue
		}
		if found {
			n++
		}
	}
	return n, false, failed
}

// heldStream opens AIRLOCK_HELD the first time a page of the index has an
// op that was held.
func (s *Scrubber) heldStream(ctx context.Context, todo []store.Scrub) (jetstream.Stream, error) {
	if s.held != nil || !slices.ContainsFunc(todo, func(sc store.Scrub) bool { return sc.Held }) {
		return s.held, nil
	}
	return s.openHeld(ctx)
}

// openHeld opens AIRLOCK_HELD once, for the sweeps that follow.
func (s *Scrubber) openHeld(ctx context.Context) (jetstream.Stream, error) {
	if s.held != nil {
		return s.held, nil
	}
	st, err := s.cfg.JetStream.Stream(ctx, streams.Held)
	if err != nil {
		return nil, fmt.Errorf("scrub: %s: %w", streams.Held, err)
	}
	s.held = st
	return st, nil
}

// Sweep erases the request of every op in the scrub index and returns how
// many entries it settled. An entry whose erasure failed stays for the
// next sweep. One Sweep runs at a time.
//
// A page with more to erase than SecureBacklog is purged: every request
// message below the lowest one that anything may still need (purgeFloor)
// goes with one request to JetStream, at most once every PurgeEvery, and
// the entries below it are settled without a delete each. An entry above
// it is left for PurgeGrace after its op ended, for a later purge to
// take (the ops in flight below it end meanwhile), and then deleted on
// its own: an op that runs for long holds the floor down.
func (s *Scrubber) Sweep(ctx context.Context, st jetstream.Stream) (int, error) {
	n := 0
	for {
		todo, err := s.cfg.Store.PendingScrubs(s.after, scrubPage)
		if err != nil || len(todo) == 0 {
			return n, err
		}
		errs := make([]error, len(todo))
		erase, workers := oplog.EraseRequest, s.cfg.Workers
		plain := s.cfg.SecureBacklog >= 0 && len(todo) > s.cfg.SecureBacklog
		if plain {
			erase, workers = oplog.DeleteRequest, deleteWorkers
			if s.floor <= todo[len(todo)-1].RequestSeq && time.Now().After(s.nextPurge) {
				floor := s.purge(ctx, st)
				// A floor held down by a long op is looked at again only
				// after the grace: each look reads every live op.
				wait := s.cfg.PurgeEvery
				if floor <= s.floor {
					wait = s.cfg.PurgeGrace
				}
				s.nextPurge = time.Now().Add(wait)
				s.floor = max(s.floor, floor)
			}
		}
		held, err := s.heldStream(ctx, todo)
		if err != nil {
			return n, err
		}
		now := time.Now()
		sem := make(chan struct{}, workers)
		// A held op's copy is erased securely whatever the backlog, and
		// so Workers at a time (one by default) however many plain
		// deletes go at once: each is a JetStream API request that
		// rewrites and syncs AIRLOCK_HELD's block under its lock, and
		// the server has as many API workers as cores. Eight at once
		// held both of a 2-core machine's, and the gate's own requests
		// (the delete that moves a new hold's request) waited behind them.
		// A goroutine gives back its place among the deletes before it
		// waits for one among the erases, so that the deletes of ops
		// never held do not wait behind the erases.
		heldSem := make(chan struct{}, s.cfg.Workers)
		var wg sync.WaitGroup
		for i, sc := range todo {
			purged := sc.RequestSeq < s.floor
			switch {
			case purged && !sc.Held:
				continue
			case !purged && plain && s.floor > 0 && !sc.Held && now.Sub(sc.Ended) < s.cfg.PurgeGrace:
				errs[i] = errLater
				continue
			}
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if !purged {
					errs[i] = erase(ctx, st, sc.RequestSeq)
				}
				<-sem
				if errs[i] == nil && sc.Held {
					// The copy a hold kept in AIRLOCK_HELD, erased
					// securely whatever the backlog: that stream is small.
					heldSem <- struct{}{}
					// A copy not there yet (its move still on its way)
					// is CheckHeld's.
					_, errs[i] = oplog.EraseHeld(ctx, held, sc.OpID)
					<-heldSem
				}
			}()
		}
		wg.Wait()
		done := make([]store.Scrub, 0, len(todo))
		var failed error
		settled := true // every entry so far is settled
		for i, sc := range todo {
			if errs[i] != nil {
				settled = false
				if failed == nil && errs[i] != errLater {
					failed = fmt.Errorf("op %s: %w", sc.OpID, errs[i])
				}
				continue
			}
			done = append(done, sc)
			if settled {
				// The index up to here is settled: the next page, and
				// the next sweep, start after it.
				s.after = sc.Key()
			}
			s.cfg.Logger.Debug("request erased", "op", sc.OpID, "request_seq", sc.RequestSeq)
		}
		if err := s.cfg.Store.Scrubbed(done...); err != nil {
			return n, err
		}
		n += len(done)
		s.erased.Add(uint64(len(done)))
		if plain {
			s.deleted.Add(uint64(len(done)))
		}
		if failed != nil {
			return n, fmt.Errorf("%d of %d erasures failed, left for the next sweep; the first: %w", len(todo)-len(done), len(todo), failed)
		}
		if len(todo) < scrubPage || !settled {
			// What is left waits for a later purge, or the next sweep.
			return n, nil
		}
	}
}

// errLater marks an entry left for a later purge.
var errLater = errors.New("left for a later purge")
