package audit

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"math/bits"
	"runtime"
	"slices"
	"sync"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/rfc6962"
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

// opSum adds up a multiset of (op, leaf index) pairs: two sums of halves
// of SHA-256, so the index and the leaves can be compared in one pass
// each without holding either.
type opSum struct {
	a, b  uint64
	count int64
}

func (s *opSum) add(op []byte, index int64) {
	// SHA-256 of op, a zero byte, the index (8 bytes, big endian), in one
	// call on the stack: no allocation for an op id's usual length.
	var buf [64]byte
	b := binary.BigEndian.AppendUint64(append(append(buf[:0], op...), 0), uint64(index))
	sum := sha256.Sum256(b)
	s.a += binary.BigEndian.Uint64(sum[0:8])
	s.b += binary.BigEndian.Uint64(sum[8:16])
	s.count++
}

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
	for _, t := range o.Trusted {
		r.Trusted = append(r.Trusted, t.Name)
		c, err := OpenCheckpoint(t.Note, o.Verifier)
		if err != nil {
			r.Anchors = append(r.Anchors, t.Name+" (does not verify)")
			r.add(o.MaxProblems, BadSignature, 0, "%s checkpoint: %v", t.Name, err)
			continue
		}
		r.Anchors = append(r.Anchors, fmt.Sprintf("%s (at %d)", t.Name, c.Size))
		wants = append(wants, want{size: c.Size, root: c.Root, trusted: t.Name})
	}
	slices.SortStableFunc(wants, func(a, b want) int { return cmp.Compare(a.size, b.size) })

	w := &walker{size: size, report: r, max: o.MaxProblems, app: NewAppender(0, nil), roots: map[int64]tlog.Hash{0: EmptyRoot}, readers: o.Readers}
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
			var idx opSum
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
		if err != nil || idx != w.ops {
			r.add(o.MaxProblems, IndexMismatch, size, "the op index lists %d leaves; %d leaves name an op (or the entries differ)", idx.count, w.ops.count)
		}
	}
	return r, nil
}

// walker recomputes the tree.
type walker struct {
	size    int64
	report  *Report
	max     int
	app     *Appender
	rng     *compact.Range
	leaves  int64
	hashes  int64
	lastSeq uint64 // of the last leaf walked
	ops     opSum  // the leaves that name an op
	// sizes are the sizes whose roots the checkpoints need, in order;
	// roots the roots taken at them (and at 0).
	sizes   []int64
	roots   map[int64]tlog.Hash
	readers int
}

// rangeFactory makes merkle's compact ranges, the second implementation
// of the tree. Its node hash is RFC 6962's (checked against merkle's own
// in the tests), computed on the stack: merkle's makes three
// allocations a node, and verify hashes about one node a leaf here.
var rangeFactory = &compact.RangeFactory{Hash: nodeHash}

func nodeHash(left, right []byte) []byte {
	var buf [1 + 2*sha256.Size]byte
	buf[0] = rfc6962.RFC6962NodeHashPrefix
	copy(buf[1:], left)
	copy(buf[1+sha256.Size:], right)
	h := sha256.Sum256(buf[:])
	return h[:]
}

// takeRoot takes the root at the walk's size when a checkpoint needs it.
func (w *walker) takeRoot() {
	n := w.app.Size()
	if _, ok := slices.BinarySearch(w.sizes, n); !ok {
		return
	}
	if _, ok := w.roots[n]; ok {
		return
	}
	if root, ok := w.root(); ok {
		w.roots[n] = root
	}
}

// root is the tree's root at the leaves walked so far, from both
// implementations; false after they disagreed (reported).
func (w *walker) root() (tlog.Hash, bool) {
	a, err := w.app.TreeHash()
	if err != nil {
		w.report.add(w.max, RootMismatch, w.app.Size(), "tlog: %v", err)
		return tlog.Hash{}, false
	}
	b, err := w.rng.GetRootHash(nil)
	if w.app.Size() == 0 {
		b, err = EmptyRoot[:], nil
	}
	if err != nil || !bytes.Equal(a[:], b) {
		w.report.add(w.max, RootMismatch, w.app.Size(), "tlog and merkle disagree on the root (%v)", err)
		return tlog.Hash{}, false
	}
	return a, true
}

var errStop = errors.New("stop")

// HashCursor reads stored hashes in index order.
type HashCursor interface {
	// Next returns the next stored hash; false at the end or on error.
	// The hash is valid until the next call.
	Next() (index int64, hash []byte, ok bool)
	Err() error
	Close() error
}

// leafItem is what the walk's reader learns of one leaf: its place, its
// stream and sequence, its record hash, or why it does not parse.
type leafItem struct {
	i      int64
	stream string
	seq    uint64
	rh     tlog.Hash
	err    error
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

// stripeLevel is the level of a stripe's subtree: walkBatch is 1<<it.
const stripeLevel = 10

// walkBatch is how many leaves a stripe holds: a reader reads its
// stripe, hands it to the hasher and seeks to its next. walkAhead is how
// many stripes each reader may have read ahead of the hasher.
const (
	walkBatch = 1 << stripeLevel
	walkAhead = 8
)

// stripe is what a reader learned of one stripe of the log: its leaves
// in order and the error that stopped its reading, if one did. When the
// stripe is whole (walkBatch leaves from its first, each parsing, each
// stored hash within it present and equal to the hash of its leaves),
// it also holds the stripe's subtree: the hasher then adds the stripe at
// once instead of leaf by leaf.
type stripe struct {
	items []leafItem
	err   error

	whole  bool
	root   tlog.Hash      // of the stripe's subtree (level stripeLevel)
	rng    *compact.Range // the stripe's range
	hashes int64          // stored hashes checked
	// tail is the stored hashes the stripe's last leaf makes above the
	// stripe's level (its subtree completing larger ones), read, not yet
	// checked: the hasher knows the subtrees to their left.
	tail []tlog.Hash
	// at are the roots of the stripe's own leaves at each wanted size
	// within it, for the hasher to complete with the subtrees to their
	// left.
	at []stripeRoot
}

type stripeRoot struct {
	size int64
	fold tlog.Hash      // tlog: the stripe's subtrees folded
	rng  *compact.Range // merkle: the stripe's range up to size
}

// walkReaders is how many goroutines read, parse and hash leaves by
// default: four a core (a reader waiting on a block read leaves its core
// to another), at most eight. On two cores, readers 1, 2, 4 and 8 gave
// 433k, 627k, 675k and 704k leaves/s (BenchmarkVerify, medians of 3).
func walkReaders() int { return max(1, min(4*runtime.GOMAXPROCS(0), 8)) }

// walk checks every leaf and stored hash. It stops at the first leaf or
// hash that breaks the tree: nothing after it can be hashed. hashes is
// false when the source has no stored hashes. at(n) is called after
// each stripe, n the leaves walked.
//
// The work is shared so that a verify uses every core: readers (one a
// core) take stripes of walkBatch leaves in turn, reader r the stripes
// r, r+n, r+2n and so on. A reader reads its stripe from the source,
// parses each leaf, hashes it (its record hash and the op index's sum)
// and, when the source's stored hashes can be read from any index, hashes
// the stripe's subtree with both implementations and checks the stored
// hashes within it. The hasher takes the stripes back in order, checks
// each leaf's place and stream sequence, and adds a whole stripe's
// subtree to both trees at once; a stripe that is not whole (the last, or
// one with a problem) it walks leaf by leaf, as the first problem must be
// found and reported exactly. The last stripe's reader reads on to the
// source's end: a stored leaf beyond the log's size is found.
func (w *walker) walk(src Source, at func(n int64)) (hashes bool, err error) {
	// subtrees: the readers hash the stripes' subtrees, which they can
	// when they can check the stored hashes within them too, or when
	// there are none.
	fromSrc, subtrees := src.(HashCursorFromSource)
	var cursor HashCursor // the hasher's own, for stripes walked leaf by leaf
	if subtrees {
		c, err := fromSrc.HashCursorFrom(0)
		switch {
		case errors.Is(err, ErrNoStoredHashes):
		case err != nil:
			return false, err
		default:
			hashes = true
			c.Close()
		}
	} else {
		c, err := src.HashCursor()
		switch {
		case errors.Is(err, ErrNoStoredHashes):
			subtrees = true
		case err != nil:
			return false, err
		default:
			hashes, cursor = true, c
		}
	}
	defer func() {
		if cursor != nil {
			cursor.Close()
		}
	}()
	var expectHash int64 // the next stored hash's index, walking leaf by leaf
	// seek points the hasher's cursor at stored hash from, for a stripe
	// walked leaf by leaf after whole ones.
	seek := func(from int64) error {
		if !hashes || expectHash == from && cursor != nil {
			return nil
		}
		if cursor != nil {
			cursor.Close()
		}
		c, err := fromSrc.HashCursorFrom(from)
		if err != nil {
			return err
		}
		cursor, expectHash = c, from
		return nil
	}
	nextStored := func() (int64, []byte, bool, error) {
		i, h, ok := cursor.Next()
		if !ok {
			return 0, nil, false, cursor.Err()
		}
		return i, h, true, nil
	}

	readers := w.readers
	if readers <= 0 {
		readers = walkReaders()
	}
	lastStripe := max(w.size-1, 0) / walkBatch
	readers = int(min(int64(readers), lastStripe+1))
	out := make([]chan stripe, readers)
	sums := make([]opSum, readers)
	free := make(chan []leafItem, readers*(walkAhead+1))
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for r := range readers {
		out[r] = make(chan stripe, walkAhead)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(out[r])
			rd := stripeReader{src: src, size: w.size, sizes: w.sizes, sum: &sums[r], subtrees: subtrees, from: fromSrc, hashes: hashes}
			for s := int64(r); s <= lastStripe; s += int64(readers) {
				var batch []leafItem
				select {
				case batch = <-free:
				default:
					batch = make([]leafItem, 0, walkBatch)
				}
				st := rd.read(s, s == lastStripe, batch)
				select {
				case out[r] <- st:
				case <-quit:
					return
				}
				if st.err != nil {
					return
				}
			}
		}()
	}
	var once sync.Once
	stopReaders := func() { once.Do(func() { close(quit); wg.Wait() }) }
	defer stopReaders()

	lastSeq := map[string]uint64{}
	// take walks one leaf: its checks, both trees, its stored hashes.
	take := func(it leafItem) error {
		switch {
		case it.i != w.leaves:
			w.report.add(w.max, LeafMismatch, w.leaves, "leaf %d is missing (next stored is %d)", w.leaves, it.i)
			return errStop
		case it.i >= w.size:
			w.report.add(w.max, LeafMismatch, it.i, "leaf %d is beyond the log's size %d", it.i, w.size)
			return errStop
		case it.err != nil:
			w.report.add(w.max, LeafMismatch, it.i, "leaf %d: %v", it.i, it.err)
			return errStop
		}
		// A stream that denies deletes numbers its messages without
		// gaps, and the projector logs every one.
		if prev, ok := lastSeq[it.stream]; ok && it.seq != prev+1 {
			w.report.add(w.max, LeafMismatch, it.i, "leaf %d is %s sequence %d, after sequence %d", it.i, it.stream, it.seq, prev)
			return errStop
		}
		lastSeq[it.stream] = it.seq
		w.lastSeq = it.seq
		_, computed, err := w.app.AppendHash(it.rh)
		if err != nil {
			return err
		}
		if err := w.rng.Append(it.rh[:], nil); err != nil {
			return err
		}
		if hashes {
			for level, h := range computed {
				si, sh, ok, err := nextStored()
				if err != nil {
					return err
				}
				if !ok || si != expectHash {
					w.hashProblem(level, it.i, expectHash, "is missing")
					return errStop
				}
				if !bytes.Equal(sh, h[:]) {
					w.hashProblem(level, it.i, expectHash, "differs from the hash of its leaves")
					return errStop
				}
				expectHash++
				w.hashes++
			}
		}
		w.leaves++
		w.takeRoot()
		return nil
	}
	at(0)
	var readErr error
	for s := int64(0); s <= lastStripe && readErr == nil; s++ {
		st, ok := <-out[s%int64(readers)]
		if !ok {
			break // a reader stopped: the one before it failed
		}
		done, err := w.addWhole(st, lastSeq, hashes)
		if errors.Is(err, errStop) {
			return hashes, nil
		} else if err != nil {
			return hashes, err
		}
		if !done {
			if err := seek(tlog.StoredHashIndex(0, w.leaves)); err != nil {
				return hashes, err
			}
			for _, it := range st.items {
				if err := take(it); errors.Is(err, errStop) {
					return hashes, nil
				} else if err != nil {
					return hashes, err
				}
			}
		}
		readErr = st.err
		at(w.leaves)
		select {
		case free <- st.items[:0]:
		default:
		}
	}
	if readErr != nil {
		return hashes, readErr
	}
	// Every reader is done: what they summed is ours to read.
	stopReaders()
	for _, sum := range sums {
		w.ops.a += sum.a
		w.ops.b += sum.b
		w.ops.count += sum.count
	}
	if w.leaves < w.size {
		w.report.add(w.max, LeafMismatch, w.leaves, "leaf %d is missing: the log's size is %d", w.leaves, w.size)
		return hashes, nil
	}
	if hashes {
		if err := seek(tlog.StoredHashIndex(0, w.size)); err != nil {
			return hashes, err
		}
		si, _, ok, err := nextStored()
		if err != nil {
			return hashes, err
		}
		if ok {
			w.report.add(w.max, HashMismatch, si, "stored hash %d is beyond the log's size %d", si, w.size)
		}
	}
	return hashes, nil
}

// addWhole adds a whole stripe at once, when its leaves are where they
// must be and their stream sequences follow on: the roots within it, its
// subtree (checking the stored hashes it completes above its level) and
// its range. false: walk it leaf by leaf; errStop: a problem is
// reported, the walk ends.
func (w *walker) addWhole(st stripe, lastSeq map[string]uint64, hashes bool) (bool, error) {
	if !st.whole || w.app.Size() != w.leaves || w.leaves%walkBatch != 0 || w.leaves+walkBatch > w.size {
		return false, nil
	}
	// The checks take() makes of each leaf, first without a change.
	var (
		stream  string
		seq     uint64
		changed map[string]uint64 // the streams' last sequences, when more than one
	)
	lastOf := func(name string) (uint64, bool) {
		if v, ok := changed[name]; ok {
			return v, true
		}
		v, ok := lastSeq[name]
		return v, ok
	}
	for k, it := range st.items {
		if it.i != w.leaves+int64(k) || it.err != nil {
			return false, nil
		}
		var prev uint64
		var ok bool
		if k > 0 && it.stream == stream {
			prev, ok = seq, true
		} else {
			if k > 0 {
				if changed == nil {
					changed = map[string]uint64{}
				}
				changed[stream] = seq
			}
			prev, ok = lastOf(it.stream)
		}
		if ok && it.seq != prev+1 {
			return false, nil
		}
		stream, seq = it.stream, it.seq
	}
	for name, v := range changed {
		lastSeq[name] = v
	}
	lastSeq[stream] = seq
	w.lastSeq = seq

	// The roots the checkpoints need within the stripe: the stripe's
	// own fold completed with the subtrees to its left.
	start := w.leaves
	for _, r := range st.at {
		a := r.fold
		for level := stripeLevel; start>>level > 0; level++ {
			if start>>level&1 == 0 {
				continue
			}
			hs, err := w.app.ReadHashes([]int64{tlog.StoredHashIndex(level, start>>level-1)})
			if err != nil {
				return false, err
			}
			a = tlog.NodeHash(hs[0], a)
		}
		left := rangeFactory.NewEmptyRange(0)
		if start > 0 {
			var err error
			if left, err = rangeFactory.NewRange(0, uint64(start), slices.Clone(w.rng.Hashes())); err != nil {
				return false, err
			}
		}
		var b []byte
		err := left.AppendRange(r.rng, nil)
		if err == nil {
			b, err = left.GetRootHash(nil)
		}
		if err != nil || !bytes.Equal(a[:], b) {
			w.report.add(w.max, RootMismatch, r.size, "tlog and merkle disagree on the root (%v)", err)
			continue
		}
		w.roots[r.size] = a
	}

	computed, err := w.app.AppendSubtree(stripeLevel, st.root)
	if err != nil {
		return false, err
	}
	if err := w.rng.AppendRange(st.rng, nil); err != nil {
		return false, err
	}
	w.hashes += st.hashes
	last := w.leaves + walkBatch - 1
	next := tlog.StoredHashIndex(0, last) + stripeLevel + 1 // the first above the stripe
	for k, h := range computed {
		if !hashes {
			break // none stored: nothing to check them against
		}
		if k >= len(st.tail) {
			w.leaves = last
			w.hashProblem(stripeLevel+1+k, last, next+int64(k), "is missing")
			return true, errStop
		}
		if st.tail[k] != h {
			w.leaves = last
			w.hashProblem(stripeLevel+1+k, last, next+int64(k), "differs from the hash of its leaves")
			return true, errStop
		}
		w.hashes++
	}
	w.leaves += walkBatch
	w.takeRoot()
	return true, nil
}

// stripeReader reads stripes for one of walk's readers.
type stripeReader struct {
	src   Source
	size  int64 // the log's
	sizes []int64
	sum   *opSum
	// subtrees: the reader hashes each stripe's subtree; with hashes it
	// checks the stored hashes within it, read from from.
	subtrees bool
	from     HashCursorFromSource
	hashes   bool
	digest   hash.Hash
}

// leafPrefix is RFC 6962's prefix of a leaf's hash (tlog.RecordHash).
var leafPrefix = []byte{0}

// read reads stripe s into batch, parsing and hashing each leaf and
// adding the ones that name an op to the reader's sum. A leaf that does
// not parse ends the stripe (nothing after it can be hashed); the last
// stripe reads on to the source's end, or to its first leaf beyond the
// log's size.
func (rd *stripeReader) read(s int64, last bool, batch []leafItem) stripe {
	from, end := s*walkBatch, (s+1)*walkBatch
	var lastStream []byte
	var name string
	if rd.digest == nil {
		rd.digest = sha256.New()
	}
	fn := func(i int64, leaf []byte) error {
		if i >= end && !last {
			return errStop // the next stripe's, or a gap ran past the stripe: the hasher finds it
		}
		it := leafItem{i: i}
		if i >= rd.size {
			batch = append(batch, it) // the hasher reports it: nothing after it counts
			return errStop
		}
		stream, op, seq, err := checkLeafOp(leaf)
		if err != nil {
			it.err = err
			batch = append(batch, it)
			return errStop
		}
		if !bytes.Equal(stream, lastStream) {
			lastStream, name = append(lastStream[:0], stream...), string(stream)
		}
		it.stream, it.seq = name, seq
		// tlog.RecordHash, without its allocations.
		rd.digest.Reset()
		rd.digest.Write(leafPrefix)
		rd.digest.Write(leaf)
		rd.digest.Sum(it.rh[:0])
		if len(op) > 0 {
			rd.sum.add(op, i)
		}
		batch = append(batch, it)
		return nil
	}
	var err error
	if ranged, ok := rd.src.(LeafRangeSource); ok && !last {
		err = ranged.LeavesBetween(from, end, fn)
	} else {
		err = rd.src.Leaves(from, fn)
	}
	if errors.Is(err, errStop) {
		err = nil
	}
	st := stripe{items: batch, err: err}
	if err == nil && rd.subtrees && len(batch) == walkBatch {
		if err := rd.subtree(s, &st); err != nil {
			st.err = err
		}
	}
	return st
}

// subtree hashes a stripe's subtree with both implementations, checks
// the stored hashes within it and reads the ones its last leaf makes
// above it. The stripe is whole when every leaf is in its place, parsed,
// and every stored hash is present and equal.
func (rd *stripeReader) subtree(s int64, st *stripe) error {
	start := s * walkBatch
	for k, it := range st.items {
		if it.i != start+int64(k) || it.err != nil {
			return nil
		}
	}
	var cursor HashCursor
	if rd.hashes {
		c, err := rd.from.HashCursorFrom(tlog.StoredHashIndex(0, start))
		if err != nil {
			return err
		}
		defer c.Close()
		cursor = c
	}
	expect := tlog.StoredHashIndex(0, start)
	check := func(h tlog.Hash) (bool, error) {
		if cursor == nil {
			return true, nil
		}
		i, sh, ok := cursor.Next()
		if !ok {
			return false, cursor.Err()
		}
		if i != expect || !bytes.Equal(sh, h[:]) {
			return false, nil
		}
		expect++
		st.hashes++
		return true, nil
	}
	rng := rangeFactory.NewEmptyRange(uint64(start))
	var frontier [stripeLevel + 1]tlog.Hash
	lo, _ := slices.BinarySearch(rd.sizes, start+1)
	for k, it := range st.items {
		h := it.rh
		if ok, err := check(h); !ok || err != nil {
			return err
		}
		level, j := 0, k
		for ; j&1 == 1; j >>= 1 {
			h = tlog.NodeHash(frontier[level], h)
			level++
			if ok, err := check(h); !ok || err != nil {
				return err
			}
		}
		frontier[level] = h
		if err := rng.Append(it.rh[:], nil); err != nil {
			return err
		}
		// A wanted size within the stripe: its own subtrees folded, right
		// to left, and its range so far.
		n := start + int64(k) + 1
		if lo < len(rd.sizes) && rd.sizes[lo] == n && k+1 < walkBatch {
			lo++
			m := k + 1
			var fold tlog.Hash
			first := true
			for level := 0; level < stripeLevel; level++ {
				if m>>level&1 == 0 {
					continue
				}
				if first {
					fold, first = frontier[level], false
				} else {
					fold = tlog.NodeHash(frontier[level], fold)
				}
			}
			snap, err := rangeFactory.NewRange(uint64(start), uint64(n), slices.Clone(rng.Hashes()))
			if err != nil {
				return err
			}
			st.at = append(st.at, stripeRoot{size: n, fold: fold, rng: snap})
		}
	}
	// The last leaf completes subtrees above the stripe as many times as
	// s ends in ones: their stored hashes follow, for the hasher.
	for up := s; up&1 == 1; up >>= 1 {
		if cursor == nil {
			break
		}
		i, sh, ok := cursor.Next()
		if !ok {
			if err := cursor.Err(); err != nil {
				return err
			}
			break
		}
		if i != expect {
			break
		}
		if len(sh) != tlog.HashSize {
			return nil // the hasher walks it leaf by leaf and says how it differs
		}
		expect++
		st.tail = append(st.tail, tlog.Hash(sh))
	}
	// The key after the stripe's hashes: one that is not a stored hash's,
	// between two stripes, is found here, as a walk in one pass finds it.
	if cursor != nil && int64(len(st.tail)) == int64(bits.TrailingZeros64(^uint64(s))) {
		if _, _, ok := cursor.Next(); !ok {
			if err := cursor.Err(); err != nil {
				return err
			}
		}
	}
	st.root, st.rng, st.whole = frontier[stripeLevel], rng, true
	return nil
}

func (w *walker) hashProblem(level int, leaf, index int64, what string) {
	if level == 0 {
		w.report.add(w.max, LeafMismatch, leaf, "leaf %d: its stored hash (index %d) %s", leaf, index, what)
		return
	}
	w.report.add(w.max, HashMismatch, index, "stored hash %d (level %d, over leaves up to %d) %s", index, level, leaf, what)
}
