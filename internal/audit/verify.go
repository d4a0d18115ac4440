package audit

import (
	"cmp"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// Status is the outcome of a verification: OK or what broke first.
type Status string

// Statuses. Each problem names one, with the index it concerns.
const (
	// StatusOK: every leaf, stored hash and checkpoint checks out.
	StatusOK Status = "OK"
	// LeafMismatch: leaf Index is missing, beyond the log's size, does
	// not decode, is out of order, or does not hash to its stored hash.
	LeafMismatch Status = "LEAF_MISMATCH"
	// HashMismatch: stored hash Index (an interior node) is missing or
	// differs from the hash of the leaves under it.
	HashMismatch Status = "HASH_MISMATCH"
	// RootMismatch: the log's own checkpoint of size Index was signed by
	// the key but its root is not the root of the stored leaves.
	RootMismatch Status = "ROOT_MISMATCH"
	// BadSignature: a checkpoint does not verify: a changed byte, a
	// wrong or unknown key, no signature, another origin, extra lines.
	BadSignature Status = "BAD_SIGNATURE"
	// Rollback: a checkpoint (the log's own or a trusted one) covers
	// more leaves than the log holds: the log was truncated or restored
	// from an older copy.
	Rollback Status = "ROLLBACK"
	// Fork: a trusted checkpoint is validly signed but its root differs
	// from the log's at its size: history was rewritten.
	Fork Status = "FORK"
	// IndexMismatch: the index of each op's leaves (what proofs are built
	// from) does not list exactly the leaves that name an op. Index is the
	// log's size.
	IndexMismatch Status = "INDEX_MISMATCH"
	// Corrupt: a file of the log's storage cannot be read at all (a
	// checksum that fails, a table or manifest that does not parse); the
	// detail names the file. Index is the leaves checked before it.
	Corrupt Status = "CORRUPT"
)

// Problem is one thing verification found wrong.
type Problem struct {
	Status Status `json:"status"`
	// Index is the leaf index (LEAF_MISMATCH), the stored hash index
	// (HASH_MISMATCH) or the checkpoint size (the others).
	Index  int64  `json:"index"`
	Detail string `json:"detail"`
}

func (p Problem) String() string { return fmt.Sprintf("%s{%d}: %s", p.Status, p.Index, p.Detail) }

// Source is a log to verify: a data dir's store, or a server's answers.
type Source interface {
	// LogSize is the size the log records for itself.
	LogSize() (int64, error)
	// Leaves calls fn with each stored leaf from index from on, in order.
	Leaves(from int64, fn func(index int64, leaf []byte) error) error
	// HashCursor reads the stored hashes in index order; it returns
	// ErrNoStoredHashes when the source has none to offer.
	HashCursor() (HashCursor, error)
	// Checkpoints returns the log's stored checkpoints, each with the
	// size it is stored under.
	Checkpoints() (sizes []int64, notes [][]byte, err error)
}

// ErrNoStoredHashes is returned by a Source that serves leaves only.
var ErrNoStoredHashes = errors.New("audit: source has no stored hashes")

// ErrCorrupt wraps a Source's error about bytes it cannot even read as
// part of a log (a malformed key, a size of the wrong length): Verify
// reports it as a problem, not as a failure to read.
var ErrCorrupt = errors.New("audit: corrupt log storage")

// ErrUnreadable wraps a Source's error about a file it cannot read at
// all (Pebble's corruption errors, a checksum mismatch): CORRUPT. It is
// an ErrCorrupt too.
var ErrUnreadable = fmt.Errorf("%w: a file is unreadable", ErrCorrupt)

// OpIndexSource is a Source that keeps an index of each op's leaves.
type OpIndexSource interface {
	// OpIndex calls fn with every entry of the index.
	OpIndex(fn func(op []byte, index int64) error) error
}

// opSum adds up a multiset of (op, leaf index) pairs, so that the index
// and the leaves can be compared in one pass each without holding
// either: two sums of 64-bit hashes keyed by seeds drawn for each verify
// (hash/maphash). Whoever wrote the index cannot know the seeds, so
// cannot choose entries whose sums match the leaves'; a SHA-256 a pair,
// as before, cost a seventh of verify's CPU.
type opSum struct {
	seed  *opSeed
	a, b  uint64
	count int64
}

type opSeed struct{ a, b maphash.Seed }

func newOpSeed() *opSeed { return &opSeed{maphash.MakeSeed(), maphash.MakeSeed()} }

func (s *opSum) add(op []byte, index int64) {
	// op, a zero byte, the index (8 bytes, big endian), on the stack for
	// an op id's usual length.
	var buf [64]byte
	b := binary.BigEndian.AppendUint64(append(append(buf[:0], op...), 0), uint64(index))
	s.a += maphash.Bytes(s.seed.a, b)
	s.b += maphash.Bytes(s.seed.b, b)
	s.count++
}

// merge adds t's pairs to s's.
func (s *opSum) merge(t opSum) { s.a, s.b, s.count = s.a+t.a, s.b+t.b, s.count+t.count }

// equal reports whether s and t summed the same multiset (with the same
// seeds).
func (s opSum) equal(t opSum) bool { return s.a == t.a && s.b == t.b && s.count == t.count }

// AppliedSource is a Source that knows the stream sequence of the last
// event its projection applied: the log's last leaf must be that event.
type AppliedSource interface {
	Applied() (uint64, error)
}

// Trusted is a checkpoint kept outside the log: from a file or from
// JetStream.
type Trusted struct {
	Name string // where it came from, for the report
	Note []byte
}

// Options configures Verify.
type Options struct {
	// Verifier checks every checkpoint. Required.
	Verifier note.Verifier
	// Trusted checkpoints the log must contain (not roll back) and agree
	// with (not fork from).
	Trusted []Trusted
	// Progress, if set, is called now and then with leaves checked.
	Progress func(done, total int64)
	// MaxProblems bounds the problems reported; default 100.
	MaxProblems int
	// Readers is how many goroutines read, parse and hash the leaves;
	// default four a core, at most eight.
	Readers int
}

// Report is what Verify found.
type Report struct {
	Status Status `json:"status"`
	// Index is the first problem's index (absent when OK).
	Index *int64 `json:"index,omitempty"`
	// Size is the size the log records; Root the root of its leaves at
	// that size (base64), when they could be hashed.
	Size   int64  `json:"size"`
	Root   string `json:"root"`
	Origin string `json:"origin"`
	// Leaves and Hashes count what was checked.
	Leaves int64 `json:"leaves"`
	Hashes int64 `json:"hashes"`
	// Checkpoints counts the log's own; CheckpointSize is the newest.
	Checkpoints    int      `json:"checkpoints"`
	CheckpointSize int64    `json:"checkpoint_size"`
	Trusted        []string `json:"trusted,omitempty"`
	// Anchors names every checkpoint the log was checked against, with
	// its size: the log's own newest, then each trusted one.
	Anchors []string `json:"anchors"`
	// Latest is the newest checkpoint that verified, for whoever wants
	// to keep it.
	Latest   []byte    `json:"-"`
	Problems []Problem `json:"problems,omitempty"`
}

// UnreadableReport is the report on a log whose storage (or key) could
// not even be opened: CORRUPT, with err naming the file.
func UnreadableReport(err error) *Report {
	r := &Report{Status: StatusOK}
	r.add(1, Corrupt, 0, "%v", err)
	return r
}

// OK reports a sound log.
func (r *Report) OK() bool { return r.Status == StatusOK }

func (r *Report) add(max int, s Status, index int64, format string, args ...any) {
	if r.Status == StatusOK {
		r.Status = s
		r.Index = &index
	}
	if len(r.Problems) < max {
		r.Problems = append(r.Problems, Problem{Status: s, Index: index, Detail: fmt.Sprintf(format, args...)})
	}
}

// Verify recomputes the tree from every leaf, checks every stored hash
// against it, every checkpoint's signature and root, and every trusted
// checkpoint for rollback and fork. Roots are computed twice, with tlog and
// with transparency-dev/merkle's compact ranges, and must agree. The error
// is for a source that cannot be read; what is wrong with the log is in
// the report.
func Verify(src Source, o Options) (*Report, error) {
	if o.Verifier == nil {
		return nil, errors.New("audit: verify needs a verifier key")
	}
	if o.MaxProblems <= 0 {
		o.MaxProblems = 100
	}
	r := &Report{Status: StatusOK, Origin: o.Verifier.Name()}
	size, err := src.LogSize()
	if errors.Is(err, ErrUnreadable) {
		r.add(o.MaxProblems, Corrupt, 0, "%v", err)
		return r, nil
	}
	if errors.Is(err, ErrCorrupt) {
		r.add(o.MaxProblems, LeafMismatch, 0, "%v", err)
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	r.Size = size

	// Checkpoints first: their sizes are where the walk must take roots.
	type want struct {
		size    int64
		root    tlog.Hash
		trusted string // "" for the log's own
	}
	var wants []want
	sizes, notes, err := src.Checkpoints()
	if errors.Is(err, ErrUnreadable) {
		r.add(o.MaxProblems, Corrupt, 0, "%v", err)
		return r, nil
	}
	if errors.Is(err, ErrCorrupt) {
		r.add(o.MaxProblems, BadSignature, 0, "%v", err)
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	r.Checkpoints = len(notes)
	for i, n := range notes {
		c, err := OpenCheckpoint(n, o.Verifier)
		if err != nil {
			r.add(o.MaxProblems, BadSignature, sizes[i], "checkpoint %d: %v", sizes[i], err)
			continue
		}
		if c.Size != sizes[i] {
			r.add(o.MaxProblems, BadSignature, sizes[i], "checkpoint stored under size %d says %d", sizes[i], c.Size)
			continue
		}
		wants = append(wants, want{size: c.Size, root: c.Root})
		if c.Size >= r.CheckpointSize {
			r.CheckpointSize, r.Latest = c.Size, c.Note
		}
	}
	if r.Checkpoints > 0 {
		r.Anchors = append(r.Anchors, fmt.Sprintf("the log's own checkpoints (newest at %d)", r.CheckpointSize))
	} else {
		r.Anchors = append(r.Anchors, "the log's own checkpoints (none)")
	}
	r.openTrusted(o, o.Trusted, func(name string, c *Checkpoint) {
		wants = append(wants, want{size: c.Size, root: c.Root, trusted: name})
	})
	slices.SortStableFunc(wants, func(a, b want) int { return cmp.Compare(a.size, b.size) })

	seed := newOpSeed()
	w := &walker{size: size, report: r, max: o.MaxProblems, app: NewAppender(0, nil), roots: map[int64]tlog.Hash{0: EmptyRoot}, readers: o.Readers, ops: opSum{seed: seed}}
	w.rng = rangeFactory.NewEmptyRange(0)
	for _, c := range wants {
		if c.size > 0 && c.size <= size && (len(w.sizes) == 0 || w.sizes[len(w.sizes)-1] != c.size) {
			w.sizes = append(w.sizes, c.size)
		}
	}
	roots := w.roots
	// The op index is read beside the walk: it needs nothing the walk
	// learns until both are done.
	type indexSum struct {
		sum opSum
		err error
	}
	var index chan indexSum
	if ix, ok := src.(OpIndexSource); ok {
		index = make(chan indexSum, 1)
		var reading sync.WaitGroup
		defer reading.Wait() // the source is the caller's again when Verify returns
		reading.Add(1)
		go func() {
			defer reading.Done()
			idx := opSum{seed: seed}
			err := ix.OpIndex(func(op []byte, i int64) error { idx.add(op, i); return nil })
			index <- indexSum{idx, err}
		}()
	}
	hashesDone, err := w.walk(src, func(n int64) {
		if o.Progress != nil && n%65536 == 0 {
			o.Progress(n, size)
		}
	})
	if errors.Is(err, ErrUnreadable) {
		r.add(o.MaxProblems, Corrupt, w.leaves, "%v", err)
		return r, nil
	} else if errors.Is(err, ErrCorrupt) {
		r.add(o.MaxProblems, LeafMismatch, w.leaves, "%v", err)
	} else if err != nil {
		return nil, err
	}
	if o.Progress != nil {
		o.Progress(w.leaves, size)
	}

	r.Leaves = w.leaves
	if hashesDone {
		r.Hashes = w.hashes
	}
	sound := r.Status == StatusOK // every leaf and hash up to size checked out
	if sound {
		root, ok := w.root()
		if ok {
			roots[size] = root
			r.Root = base64.StdEncoding.EncodeToString(root[:])
		}
	}

	for _, c := range wants {
		switch root, known := roots[c.size]; {
		case c.size > size && c.trusted == "":
			r.add(o.MaxProblems, Rollback, c.size, "the log's own checkpoint covers %d leaves; the log holds %d", c.size, size)
		case c.size > size:
			r.add(o.MaxProblems, Rollback, c.size, "%s checkpoint covers %d leaves; the log holds %d", c.trusted, c.size, size)
		case !known:
			// The leaves under it did not check out: reported already.
		case root != c.root && c.trusted == "":
			r.add(o.MaxProblems, RootMismatch, c.size, "checkpoint root %s; the leaves give %s", c.root, root)
		case root != c.root:
			r.add(o.MaxProblems, Fork, c.size, "%s checkpoint root %s; the log's root at that size is %s", c.trusted, c.root, root)
		}
	}
	// The log and the state it describes were written together: a log
	// that ends before the projection's last event lost its tail.
	if as, ok := src.(AppliedSource); ok && r.Status == StatusOK {
		applied, err := as.Applied()
		if errors.Is(err, ErrUnreadable) {
			r.add(o.MaxProblems, Corrupt, size, "%v", err)
			return r, nil
		}
		if err != nil {
			return nil, err
		}
		if w.lastSeq != applied {
			r.add(o.MaxProblems, LeafMismatch, size, "the log ends at stream sequence %d; the projection applied %d", w.lastSeq, applied)
		}
	}
	// Proofs find an op's leaves through the index: it must list them
	// all and nothing else.
	if index != nil && r.Status == StatusOK {
		got := <-index
		idx, err := got.sum, got.err
		if errors.Is(err, ErrUnreadable) {
			r.add(o.MaxProblems, Corrupt, size, "%v", err)
			return r, nil
		}
		if err != nil && !errors.Is(err, ErrCorrupt) {
			return nil, err
		}
		if err != nil || !idx.equal(w.ops) {
			r.add(o.MaxProblems, IndexMismatch, size, "the op index lists %d leaves; %d leaves name an op (or the entries differ)", idx.count, w.ops.count)
		}
	}
	return r, nil
}

// HashCursor reads stored hashes in index order.
type HashCursor interface {
	// Next returns the next stored hash; false at the end or on error.
	// The hash is valid until the next call.
	Next() (index int64, hash []byte, ok bool)
	Err() error
	Close() error
}

// HashCursorFromSource is a Source whose stored hashes can be read from
// any index on. Verify's readers then check each stripe's hashes, and
// hash its subtree, in parallel; without it the hasher does it all.
type HashCursorFromSource interface {
	HashCursorFrom(index int64) (HashCursor, error)
}

// LeafRangeSource is a Source that reads the leaves of a range of
// indexes, every key in it: a stripe's reader reads its own and no more
// (a key that is not a leaf's, between two stripes, is found by the
// stripe before it). Without it, a reader reads on to the first leaf
// of the next stripe.
type LeafRangeSource interface {
	// LeavesBetween calls fn with each stored leaf of index from to to
	// (excluded), in order.
	LeavesBetween(from, to int64, fn func(index int64, leaf []byte) error) error
}

// openTrusted opens each trusted checkpoint, naming it among the report's
// trusted and anchors, reporting one that does not verify, and calls fn
// with each that does.
func (r *Report) openTrusted(o Options, trusted []Trusted, fn func(name string, c *Checkpoint)) {
	for _, t := range trusted {
		r.Trusted = append(r.Trusted, t.Name)
		c, err := OpenCheckpoint(t.Note, o.Verifier)
		if err != nil {
			r.Anchors = append(r.Anchors, t.Name+" (does not verify)")
			r.add(o.MaxProblems, BadSignature, 0, "%s checkpoint: %v", t.Name, err)
			continue
		}
		r.Anchors = append(r.Anchors, fmt.Sprintf("%s (at %d)", t.Name, c.Size))
		fn(t.Name, c)
	}
}

// CheckTrusted checks trusted checkpoints against a log Verify already
// walked, as Verify checks its Options.Trusted, adding to rep what it
// finds: a start walks the log while its trusted checkpoints (JetStream's)
// are still being fetched. A checkpoint beyond the log's size is a
// rollback; one within it is compared with the root at its size, read
// from the stored hashes the walk checked: only when rep is OK (on a log
// that failed, the walk's own problems stand, and a fork below them is
// not looked for: `airlock audit verify` reports both, and the order of
// problems, so the status, may differ from its). A stored hash that can
// no longer be read is reported CORRUPT.
func CheckTrusted(hashes tlog.HashReader, rep *Report, o Options, trusted []Trusted) {
	if o.MaxProblems <= 0 {
		o.MaxProblems = 100
	}
	sound := rep.OK()
	type opened struct {
		name string
		c    *Checkpoint
	}
	var cs []opened
	rep.openTrusted(o, trusted, func(name string, c *Checkpoint) { cs = append(cs, opened{name, c}) })
	// In size order, as Verify reports them.
	slices.SortStableFunc(cs, func(a, b opened) int { return cmp.Compare(a.c.Size, b.c.Size) })
	for _, t := range cs {
		c := t.c
		switch {
		case c.Size > rep.Size:
			rep.add(o.MaxProblems, Rollback, c.Size, "%s checkpoint covers %d leaves; the log holds %d", t.name, c.Size, rep.Size)
		case !sound:
		default:
			root, err := tlog.TreeHash(c.Size, hashes)
			if c.Size == 0 {
				root, err = EmptyRoot, nil
			}
			if err != nil {
				// The walk read these hashes a moment ago: the store
				// failed since, as a walk's unreadable store is reported.
				rep.add(o.MaxProblems, Corrupt, c.Size, "%s checkpoint: the root at %d: %v", t.name, c.Size, err)
				continue
			}
			if root != c.Root {
				rep.add(o.MaxProblems, Fork, c.Size, "%s checkpoint root %s; the log's root at that size is %s", t.name, c.Root, root)
			}
		}
	}
}
