package audit

import (
	"fmt"

	"golang.org/x/mod/sumdb/tlog"
)

// Appender computes the hashes an append must store (tlog.StoredHashes)
// and the tree hash at the current size, keeping in memory the one hash per
// level that both need: the newest complete subtree of that level. Hashes
// it does not hold (after a restart) come from Read. Not safe for
// concurrent use.
type Appender struct {
	size     int64
	frontier []node // by level
	// Read reads stored hashes the frontier does not hold.
	Read tlog.HashReader
}

type node struct {
	n    int64 // the subtree's number at its level; -1 when unknown
	hash tlog.Hash
}

// NewAppender returns an appender for a tree of size leaves whose stored
// hashes read reads.
func NewAppender(size int64, read tlog.HashReader) *Appender {
	return &Appender{size: size, Read: read}
}

// Size is the number of leaves appended.
func (a *Appender) Size() int64 { return a.size }

// Append adds one leaf and returns its index and the hashes to store
// from tlog.StoredHashIndex(0, index) on.
func (a *Appender) Append(leaf []byte) (int64, []tlog.Hash, error) {
	return a.AppendHash(tlog.RecordHash(leaf))
}

// AppendHash is Append given the leaf's record hash.
func (a *Appender) AppendHash(h tlog.Hash) (int64, []tlog.Hash, error) {
	n := a.size
	hashes, err := tlog.StoredHashesForRecordHash(n, h, a)
	if err != nil {
		return 0, nil, err
	}
	for level, h := range hashes {
		a.remember(level, n>>level, h)
	}
	a.size++
	return n, hashes, nil
}

// AppendSubtree adds 1<<level leaves at once, given the hash of the
// complete subtree they make; the appender's size must be a multiple of
// 1<<level. It returns the hashes the append stores above level (the
// subtree completing larger ones), in order; those at level and below are
// the caller's.
func (a *Appender) AppendSubtree(level int, h tlog.Hash) ([]tlog.Hash, error) {
	h0 := h
	if level < 0 || level > 62 || a.size&(1<<level-1) != 0 {
		return nil, fmt.Errorf("audit: a subtree of level %d does not start at size %d", level, a.size)
	}
	// Read every left sibling before remembering anything: the frontier
	// holds one subtree a level, and the new ones replace them.
	first, n0, leaves := level, a.size>>level, int64(1)<<level
	var above []tlog.Hash
	for n := n0; n&1 == 1; n >>= 1 {
		left, err := a.ReadHashes([]int64{tlog.StoredHashIndex(level, n-1)})
		if err != nil {
			return nil, err
		}
		h = tlog.NodeHash(left[0], h)
		level++
		above = append(above, h)
	}
	a.remember(first, n0, h0)
	for k, h := range above {
		a.remember(first+1+k, n0>>(k+1), h)
	}
	a.size += leaves
	return above, nil
}

// TreeHash is the root of the tree at its current size.
func (a *Appender) TreeHash() (tlog.Hash, error) { return tlog.TreeHash(a.size, a) }

func (a *Appender) remember(level int, n int64, h tlog.Hash) {
	for len(a.frontier) <= level {
		a.frontier = append(a.frontier, node{n: -1})
	}
	if a.frontier[level].n <= n {
		a.frontier[level] = node{n: n, hash: h}
	}
}

// ReadHashes serves tlog from the frontier and Read.
func (a *Appender) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	var miss []int64
	var at []int
	for i, idx := range indexes {
		level, n := tlog.SplitStoredHashIndex(idx)
		if level < len(a.frontier) && a.frontier[level].n == n {
			out[i] = a.frontier[level].hash
			continue
		}
		miss = append(miss, idx)
		at = append(at, i)
	}
	if len(miss) == 0 {
		return out, nil
	}
	if a.Read == nil {
		return nil, fmt.Errorf("audit: stored hashes %v not held", miss)
	}
	got, err := a.Read.ReadHashes(miss)
	if err != nil {
		return nil, err
	}
	if len(got) != len(miss) {
		return nil, fmt.Errorf("audit: read %d hashes for %d indexes", len(got), len(miss))
	}
	for j, i := range at {
		out[i] = got[j]
		level, n := tlog.SplitStoredHashIndex(miss[j])
		a.remember(level, n, got[j])
	}
	return out, nil
}

// EmptyRoot is the root of the tree of no leaves (RFC 6962: the SHA-256 of
// the empty string).
var EmptyRoot = func() tlog.Hash { h, _ := tlog.TreeHash(0, nil); return h }()
