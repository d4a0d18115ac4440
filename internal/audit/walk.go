package audit

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"runtime"
	"slices"
	"sync"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/tlog"
)

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

// leafItem is what the walk's reader learns of one leaf: its place, its
// stream and sequence, its record hash, or why it does not parse.
type leafItem struct {
	i      int64
	stream string
	seq    uint64
	rh     tlog.Hash
	err    error
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
// the stripe's subtree once (tlog's node hash; merkle's compact ranges
// are made of its subtrees) and checks the stored hashes within it. The hasher takes the stripes back in order, checks
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
	for r := range sums {
		sums[r].seed = w.ops.seed
	}
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
		w.ops.merge(sum)
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

func (w *walker) hashProblem(level int, leaf, index int64, what string) {
	if level == 0 {
		w.report.add(w.max, LeafMismatch, leaf, "leaf %d: its stored hash (index %d) %s", leaf, index, what)
		return
	}
	w.report.add(w.max, HashMismatch, index, "stored hash %d (level %d, over leaves up to %d) %s", index, level, leaf, what)
}
