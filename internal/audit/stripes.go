package audit

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"hash"
	"math/bits"
	"slices"

	"github.com/transparency-dev/merkle/compact"
	"golang.org/x/mod/sumdb/tlog"
)

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

// subtree hashes a stripe's subtree with tlog's node hash (its compact
// ranges are made of the subtrees that completes: frontierRange), checks
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
			snap, err := frontierRange(start, m, &frontier)
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
	rng, err := frontierRange(start, walkBatch, &frontier)
	if err != nil {
		return err
	}
	st.root, st.rng, st.whole = frontier[stripeLevel], rng, true
	return nil
}

// frontierRange is merkle's compact range of the stripe's first m
// leaves, made of the subtrees tlog's walk completed: one per bit of m,
// the largest (leftmost) first. Within a stripe the nodes are hashed
// once; merkle's range algorithm still joins the stripes and takes
// every root (ADR 0011).
func frontierRange(start int64, m int, frontier *[stripeLevel + 1]tlog.Hash) (*compact.Range, error) {
	hashes := make([][]byte, 0, bits.OnesCount(uint(m)))
	for level := stripeLevel; level >= 0; level-- {
		if m>>level&1 == 1 {
			hashes = append(hashes, slices.Clone(frontier[level][:]))
		}
	}
	return rangeFactory.NewRange(uint64(start), uint64(start)+uint64(m), hashes)
}
