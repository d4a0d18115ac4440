package store

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrNotFound is returned for an op the store does not hold.
var ErrNotFound = errors.New("store: not found")

// ErrBadCursor is returned by List for a cursor it did not issue.
var ErrBadCursor = errors.New("store: bad cursor")

// MaxPage bounds the ops one List call returns.
const MaxPage = events.MaxPage

var keyApplied = []byte("m/applied")

// Store is safe for concurrent use. Writes go through one Batch at a time
// (the projector is the only writer); reads may run concurrently with it.
type Store struct {
	dir string
	db  *pebble.DB

	// live caches ops that are not terminal, the ones the next events
	// will touch, so applying them needs no read. Only Commit writes it.
	mu        sync.Mutex
	live      map[string]events.Op
	liveLimit int
	// counts is the number of ops in each state (see counts.go), and
	// countsStale says a commit found them wrong; only Commit writes them.
	counts      map[events.State]int64
	countsStale bool

	// scratch is what one commit builds its writes in, kept for the next:
	// a commit of a few hundred ops allocated about 3 KB per op for them,
	// a twentieth of what an op allocates in all (docs/performance.md).
	scratch commitScratch

	// app writes the audit tree; only batches use it, one at a time.
	app            *audit.Appender
	maxCheckpoints int
	checkpoints    int // stored checkpoints; -1 until counted

	// ended filters the ids of ended ops (MaybeEnded); stop ends its
	// indexing at Close.
	ended *ended
	stop  context.CancelFunc
	built chan struct{}
}

// MaxLiveCache bounds the ops the store caches in memory.
const MaxLiveCache = 100_000

// Open opens or creates the store in dir.
func Open(dir string) (*Store, error) { return open(dir, false) }

// OpenReadOnly opens an existing store for reading only (a verifier's
// view of a data dir). It still takes the directory's lock: a running
// server's store is read through its queries instead.
func OpenReadOnly(dir string) (*Store, error) { return open(dir, true) }

func open(dir string, readOnly bool) (*Store, error) {
	opts := &pebble.Options{Logger: quietLogger{}, ReadOnly: readOnly, MemTableSize: 64 << 20,
		// Pebble's default for a corrupt block is to die (Logger.Fatalf):
		// here the read that found it returns a corruption error, which
		// the store reports as audit.ErrCorrupt, naming the file.
		EventListener: &pebble.EventListener{DataCorruption: func(info pebble.DataCorruptionInfo) {
			quietLogger{}.Errorf("corruption in %s", info.Path)
		}}}
	// Most lookups in the projector are for ops that do not exist yet:
	// bloom filters answer those without reading blocks.
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		opts.Levels[i].BlockSize = 32 << 10
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, corrupt(err))
	}
	s := &Store{dir: dir, db: db, live: make(map[string]events.Op), liveLimit: MaxLiveCache, maxCheckpoints: MaxCheckpoints, checkpoints: -1,
		ended: newEnded(), built: make(chan struct{})}
	if err := s.loadCounts(readOnly); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store %s: %w", dir, corrupt(err))
	}
	// The filter of ended ops is read beside the start: until it is,
	// every question goes to Pebble.
	ctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	go func() {
		defer close(s.built)
		_ = s.indexEnded(ctx)
	}()
	return s, nil
}

// Close closes the store. It is not safe to call twice.
func (s *Store) Close() error {
	s.stop()
	<-s.built
	s.scratch.mu.Lock()
	if s.scratch.batch != nil {
		_ = s.scratch.batch.Close()
		s.scratch.batch = nil
	}
	s.scratch.mu.Unlock()
	return s.db.Close()
}

// Applied returns the stream sequence of the last applied event, 0 if none.
func (s *Store) Applied() (uint64, error) { return s.uint64Key(keyApplied, "applied sequence") }

// uint64Key reads a big-endian 8-byte value, 0 when the key is absent.
func (s *Store) uint64Key(key []byte, what string) (uint64, error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, corrupt(err)
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("store: %s is %d bytes", what, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// Op returns the op with id, or ErrNotFound. The caller owns the result.
func (s *Store) Op(id string) (*events.Op, error) {
	v, closer, err := s.db.Get(opKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	op := new(events.Op)
	if err := decodeOpRecord(v, op); err != nil {
		return nil, fmt.Errorf("store: op %s: %w", id, err)
	}
	return op, nil
}

// List returns up to limit ops in creation order, of one state or of every
// state when state is StateNew, of one workspace or of all when ws is "",
// starting after the cursor a previous call returned ("" for the first
// page). next is "" on the last page.
func (s *Store) List(state events.State, ws string, cursor string, limit int) (ops []*events.Op, next string, err error) {
	return s.list(state, ws, cursor, limit, false)
}

// ListNewest is List newest first: the cursor a call returns continues
// with older ops.
func (s *Store) ListNewest(state events.State, ws string, cursor string, limit int) (ops []*events.Op, next string, err error) {
	return s.list(state, ws, cursor, limit, true)
}

func (s *Store) list(state events.State, ws string, cursor string, limit int, newest bool) (ops []*events.Op, next string, err error) {
	if limit <= 0 || limit > MaxPage {
		limit = MaxPage
	}
	prefix := []byte("a/")
	if state != events.StateNew {
		prefix = []byte("s/" + string(state) + "/")
	}
	lower, upper := prefix, prefixEnd(prefix)
	if cursor != "" {
		after, err := hex.DecodeString(cursor)
		if err != nil || len(after) < 10 {
			return nil, "", fmt.Errorf("%w: %q", ErrBadCursor, cursor)
		}
		at := append(append([]byte{}, prefix...), after...)
		if newest {
			upper = at // strictly before the cursor
		} else {
			lower = append(at, 0) // strictly after the cursor
		}
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, "", err
	}
	defer it.Close()
	first, step := it.First, it.Next
	if newest {
		first, step = it.Last, it.Prev
	}
	var last []byte
	for ok := first(); ok; ok = step() {
		if len(ops) == limit {
			next = hex.EncodeToString(last)
			break
		}
		rest := it.Key()[len(prefix):]
		op, err := s.Op(string(rest[9:])) // 8-byte seq and '/'
		if err != nil {
			return nil, "", err
		}
		last = append(last[:0], rest...)
		if ws != "" && op.Workspace != ws {
			continue
		}
		ops = append(ops, op)
	}
	return ops, next, it.Error()
}

// Batch is one applied unit: every op it touches and the applied sequence,
// committed atomically. It is not safe for concurrent use.
type Batch struct {
	s       *Store
	ops     map[string]*entry
	order   []string
	applied uint64

	countsStale bool // the counts were found wrong (see counts.go)

	leaves          []pendingLeaf
	checkpoint      *audit.Checkpoint
	checkpointDelta int  // change to the count of stored checkpoints
	touched         bool // the audit appender moved on with this batch
}

type entry struct {
	op   *events.Op
	from events.State // state at the start of the batch; StateNew if absent
	// fromKept: the op's result was kept at the start of the batch.
	fromKept bool
}

// NewBatch starts a batch.
func (s *Store) NewBatch() *Batch {
	return &Batch{s: s, ops: make(map[string]*entry)}
}

// Op returns the op as this batch sees it, or a new zero op when the store
// does not hold it. Changes the caller makes to it are written by Commit.
// known is true when the caller knows the op is new (its event was
// appended with expected last subject sequence 0), which saves the read.
func (b *Batch) Op(id string, known bool) (*events.Op, error) {
	if e, ok := b.ops[id]; ok {
		return e.op, nil
	}
	op := new(events.Op)
	if !known {
		b.s.mu.Lock()
		cached, ok := b.s.live[id]
		b.s.mu.Unlock()
		if ok {
			*op = cached
		} else {
			stored, err := b.s.Op(id)
			switch {
			case err == nil:
				op = stored
			case !errors.Is(err, ErrNotFound):
				return nil, err
			}
		}
	}
	b.ops[id] = &entry{op: op, from: op.State, fromKept: keptNow(op)}
	b.order = append(b.order, id)
	return op, nil
}

// SetApplied records seq as the last applied stream sequence.
func (b *Batch) SetApplied(seq uint64) { b.applied = seq }

// AppliedSeq is the sequence SetApplied last recorded.
func (b *Batch) AppliedSeq() uint64 { return b.applied }

// Commit writes the batch. sync makes it durable against power loss before
// it returns; without it a process crash still loses nothing already
// committed.
func (b *Batch) Commit(sync bool) error {
	if err := b.commit(sync); err != nil {
		b.Abort()
		return err
	}
	b.touched = false
	if b.checkpoint != nil && b.s.checkpoints >= 0 {
		b.s.checkpoints += b.checkpointDelta
	}
	return nil
}

func (b *Batch) commit(sync bool) error {
	sc := &b.s.scratch
	sc.mu.Lock()
	defer sc.mu.Unlock()
	pb := &sorted{w: slices.Grow(sc.w[:0], 8*len(b.order)+4*len(b.leaves)+8)}
	defer func() { sc.keep(pb.w) }()
	delta := countDelta{}
	retained := map[string]int64{}
	// The batch's records, one after the other in one buffer; each value
	// is a slice of it (a slice of an outgrown array stays valid; the
	// buffer is reused only once the writes are in the Pebble batch).
	recs := slices.Grow(sc.recs[:0], 512*len(b.order))
	defer func() { sc.recs = keepBuf(recs) }()
	for _, id := range b.order {
		e := b.ops[id]
		if e.op.State == events.StateNew {
			continue // looked up but never created
		}
		start := len(recs)
		var err error
		if recs, err = appendOpRecord(recs, e.op); err != nil {
			return fmt.Errorf("store: %w", err)
		}
		if err := pb.Set(opKey(id), recs[start:len(recs):len(recs)], nil); err != nil {
			return err
		}
		if err := markResult(pb, e, retained); err != nil { // see results.go
			return err
		}
		if e.from == e.op.State {
			continue
		}
		delta.move(e.from, e.op.State)
		if err := markScrub(pb, e); err != nil { // see scrub.go
			return err
		}
		if e.from == events.StateNew {
			if err := pb.Set(orderKey("a/", e.op), nil, nil); err != nil {
				return err
			}
		} else if err := pb.Delete(orderKey("s/"+string(e.from)+"/", e.op), nil); err != nil {
			return err
		}
		if err := pb.Set(orderKey("s/"+string(e.op.State)+"/", e.op), nil, nil); err != nil {
			return err
		}
	}
	if err := b.s.writeRetained(pb, retained); err != nil {
		return err
	}
	countsOK := len(delta) == 0 || writeCounts(pb, b.s.counts, delta)
	if err := b.writeLog(pb); err != nil {
		return err
	}
	if b.applied != 0 {
		var v [8]byte
		binary.BigEndian.PutUint64(v[:], b.applied)
		if err := pb.Set(keyApplied, v[:], nil); err != nil {
			return err
		}
		// The counts go with this sequence, unless one went below zero:
		// then the next open counts again.
		// Once wrong, they stay marked wrong until an open counts again.
		b.countsStale = b.s.countsStale || !countsOK
		var counted error
		if b.countsStale {
			counted = pb.Delete(keyCounted, nil)
		} else {
			counted = pb.Set(keyCounted, v[:], nil)
		}
		if counted != nil {
			return counted
		}
	}
	opts := pebble.NoSync
	if sync {
		opts = pebble.Sync
	}
	// Ops that end are in the filter of ended ops before they are in the
	// store: never the other way round (a commit that fails leaves a
	// false positive, which costs a read).
	for _, id := range b.order {
		if e := b.ops[id]; e.op.State.Terminal() && !e.from.Terminal() {
			b.s.ended.add(id)
		}
	}
	pebbleBatch, err := pb.batch(b.s.db, sc.batch)
	sc.batch = nil
	if err != nil {
		return err
	}
	if err := pebbleBatch.Commit(opts); err != nil {
		pebbleBatch.Close()
		return err
	}
	sc.batch = pebbleBatch
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	for st, d := range delta {
		b.s.counts[st] = max(0, b.s.counts[st]+d)
	}
	b.s.countsStale = b.s.countsStale || b.countsStale
	for _, id := range b.order {
		op := b.ops[id].op
		_, cached := b.s.live[id]
		switch {
		case op.State == events.StateNew:
		case op.State.Terminal():
			delete(b.s.live, id)
		case cached || len(b.s.live) < b.s.liveLimit:
			// A cached op is always refreshed, full or not: a stale
			// entry would be read in place of the store.
			b.s.live[id] = *op
		}
	}
	return nil
}

// Abort gives up a batch that will not be committed, so that the next
// batch's audit leaves follow the last committed one.
func (b *Batch) Abort() {
	if b.touched {
		b.s.app = nil
		b.s.checkpoints = -1
		b.touched = false
	}
}

func opKey(id string) []byte { return []byte("o/" + id) }

func orderKey(prefix string, op *events.Op) []byte {
	k := make([]byte, 0, len(prefix)+9+len(op.ID))
	k = append(k, prefix...)
	k = binary.BigEndian.AppendUint64(k, op.FirstSeq)
	k = append(k, '/')
	return append(k, op.ID...)
}

func prefixEnd(p []byte) []byte {
	end := append([]byte{}, p...)
	end[len(end)-1]++
	return end
}

// quietLogger drops Pebble's informational log and keeps its errors.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any) {}
func (quietLogger) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pebble: "+format+"\n", args...)
}

// Fatalf is Pebble giving up on its own state (a broken invariant, a
// failed commit): the process exits, without a stack trace, with the
// audit status 5 and CORRUPT when the message says corruption.
func (quietLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if strings.Contains(strings.ToLower(msg), "corrupt") {
		fmt.Fprintf(os.Stderr, "airlock: CORRUPT: the projection store: pebble: %s\n", msg)
		os.Exit(ExitCorrupt)
	}
	fmt.Fprintf(os.Stderr, "airlock: pebble: fatal: %s\n", msg)
	os.Exit(1)
}

// ExitCorrupt is the exit status of a process that found its store
// corrupt: the audit status.
const ExitCorrupt = 5

// corrupt marks a Pebble corruption error, or one that names a file
// Pebble could not parse, as audit.ErrUnreadable.
func corrupt(err error) error {
	if err == nil || errors.Is(err, audit.ErrUnreadable) {
		return err
	}
	// Pebble marks what a checksum caught; a manifest or OPTIONS file
	// that no longer parses it reports in words, and so a table the
	// manifest names that is not on the disk (a manifest whose newest
	// edits were damaged names tables a compaction had removed).
	msg := strings.ToLower(err.Error())
	if pebble.IsCorruptionError(err) || strings.Contains(msg, "corrupt") || strings.Contains(msg, "checksum") ||
		strings.Contains(msg, "malformed") || strings.Contains(msg, "invalid key=value") || strings.Contains(msg, "invalid options") ||
		strings.Contains(msg, "unknown to the objstorage provider") {
		return fmt.Errorf("%w: %s", audit.ErrUnreadable, firstLine(err.Error()))
	}
	return err
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// CheckTables reads every block of every live table and checks its
// checksum, as reads do only for the blocks they touch: a flipped byte in
// a block no scan reads (a filter, say) is found here. It is what an
// offline audit verify adds; the error names the file.
func (s *Store) CheckTables(ctx context.Context) error {
	levels, err := s.db.SSTables()
	if err != nil {
		return corrupt(err)
	}
	for _, level := range levels {
		for _, t := range level {
			name := filepath.Join(s.dir, fmt.Sprintf("%06d.sst", uint64(t.BackingSSTNum)))
			if err := checkTable(ctx, name); err != nil {
				return fmt.Errorf("%w: %s: %s", audit.ErrUnreadable, name, firstLine(err.Error()))
			}
		}
	}
	return nil
}

func checkTable(ctx context.Context, name string) error {
	f, err := vfs.Default.Open(name)
	if err != nil {
		return err
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		_ = f.Close()
		return err
	}
	r, err := sstable.NewReader(ctx, readable, sstable.ReaderOptions{})
	if err != nil {
		_ = readable.Close()
		return err
	}
	defer r.Close()
	return r.ValidateBlockChecksums()
}
