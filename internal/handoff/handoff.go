package handoff

import (
	"encoding/json"
	"sync"
	"sync/atomic"
)

// Default bounds of New's zero values.
const (
	DefaultMaxEntries = 8192
	DefaultMaxBytes   = 16 << 20
)

// Args holds args by op id, oldest evicted first once either bound is
// reached. It is safe for concurrent use.
type Args struct {
	maxEntries, maxBytes int

	mu    sync.Mutex
	m     map[string]entry
	queue []key // insertion order; entries taken since are skipped
	head  int
	bytes int

	hits, misses atomic.Uint64
}

type key struct {
	op  string
	seq uint64
}

type entry struct {
	seq  uint64
	args json.RawMessage
}

// New returns an empty Args holding at most maxEntries entries and
// maxBytes bytes of args; 0 takes the defaults.
func New(maxEntries, maxBytes int) *Args {
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	return &Args{maxEntries: maxEntries, maxBytes: maxBytes, m: make(map[string]entry)}
}

// Put offers the args of op's request, stored at sequence seq. Args larger
// than the byte bound are not kept. Put on a nil Args does nothing.
func (a *Args) Put(op string, seq uint64, args json.RawMessage) {
	if a == nil || len(args) > a.maxBytes {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if old, ok := a.m[op]; ok {
		a.bytes -= len(old.args)
	}
	a.m[op] = entry{seq: seq, args: args}
	a.bytes += len(args)
	a.queue = append(a.queue, key{op, seq})
	for len(a.m) > a.maxEntries || a.bytes > a.maxBytes {
		a.evictOldest()
	}
	// Keys of taken entries pile up behind the live ones, and evicted
	// ones ahead of head: either way the queue is cut back to the keys
	// still held.
	if len(a.queue)-a.head > 2*a.maxEntries || a.head > len(a.queue)/2 && a.head > 64 {
		a.compact()
	}
}

// compact drops from the queue the keys of entries taken or replaced since
// they were put, which would otherwise pile up while nothing is evicted.
func (a *Args) compact() {
	live := a.queue[:0]
	for _, k := range a.queue[a.head:] {
		if e, ok := a.m[k.op]; ok && e.seq == k.seq {
			live = append(live, k)
		}
	}
	clear(a.queue[len(live):])
	a.queue, a.head = live, 0
}

// evictOldest drops the oldest entry still held.
func (a *Args) evictOldest() {
	for a.head < len(a.queue) {
		k := a.queue[a.head]
		a.head++
		if e, ok := a.m[k.op]; ok && e.seq == k.seq {
			delete(a.m, k.op)
			a.bytes -= len(e.args)
			return
		}
	}
}

// Take returns and forgets the args of op's request stored at seq, if
// held. An entry for the op under another sequence is left alone. Take on
// a nil Args finds nothing.
func (a *Args) Take(op string, seq uint64) (json.RawMessage, bool) {
	if a == nil {
		return nil, false
	}
	a.mu.Lock()
	e, ok := a.m[op]
	if ok && e.seq == seq {
		delete(a.m, op)
		a.bytes -= len(e.args)
	}
	a.mu.Unlock()
	if !ok || e.seq != seq {
		a.misses.Add(1)
		return nil, false
	}
	a.hits.Add(1)
	return e.args, true
}

// Stats are how many Takes found their args and how many did not.
func (a *Args) Stats() (hits, misses uint64) {
	if a == nil {
		return 0, 0
	}
	return a.hits.Load(), a.misses.Load()
}

// Len is how many entries are held, and their bytes.
func (a *Args) Len() (entries, bytes int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.m), a.bytes
}
