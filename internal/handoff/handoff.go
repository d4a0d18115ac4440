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

// Store holds one value per op id, under the request sequence it was
// read from, oldest evicted first once either bound is reached: at most
// maxEntries values and maxBytes bytes as size counts them. It is safe for
// concurrent use.
type Store[V any] struct {
	maxEntries, maxBytes int
	size                 func(V) int

	mu    sync.Mutex
	m     map[string]entry[V]
	queue []key // insertion order; entries taken since are skipped
	head  int
	bytes int

	hits, misses atomic.Uint64
}

// Args holds the args of admitted requests, for the runner of the same
// process.
type Args = Store[json.RawMessage]

type key struct {
	op  string
	seq uint64
}

type entry[V any] struct {
	seq  uint64
	v    V
	size int
}

// New returns an empty Args holding at most maxEntries entries and
// maxBytes bytes of args; 0 takes the defaults.
func New(maxEntries, maxBytes int) *Args {
	return NewStore(maxEntries, maxBytes, func(args json.RawMessage) int { return len(args) })
}

// NewStore returns an empty Store holding at most maxEntries values and
// maxBytes bytes of them as size counts them; 0 takes the defaults.
func NewStore[V any](maxEntries, maxBytes int, size func(V) int) *Store[V] {
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	return &Store[V]{maxEntries: maxEntries, maxBytes: maxBytes, size: size, m: make(map[string]entry[V])}
}

// Put offers the value read from op's request, stored at sequence seq.
// A value larger than the byte bound is not kept. Put on a nil Store does
// nothing.
func (a *Store[V]) Put(op string, seq uint64, v V) {
	if a == nil {
		return
	}
	n := a.size(v)
	if n > a.maxBytes {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if old, ok := a.m[op]; ok {
		a.bytes -= old.size
	}
	a.m[op] = entry[V]{seq: seq, v: v, size: n}
	a.bytes += n
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
func (a *Store[V]) compact() {
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
func (a *Store[V]) evictOldest() {
	for a.head < len(a.queue) {
		k := a.queue[a.head]
		a.head++
		if e, ok := a.m[k.op]; ok && e.seq == k.seq {
			delete(a.m, k.op)
			a.bytes -= e.size
			return
		}
	}
}

// Take returns and forgets the value of op's request stored at seq, if
// held. An entry for the op under another sequence is left alone. Take on
// a nil Store finds nothing.
func (a *Store[V]) Take(op string, seq uint64) (V, bool) {
	var zero V
	if a == nil {
		return zero, false
	}
	a.mu.Lock()
	e, ok := a.m[op]
	if ok && e.seq == seq {
		delete(a.m, op)
		a.bytes -= e.size
	}
	a.mu.Unlock()
	if !ok || e.seq != seq {
		a.misses.Add(1)
		return zero, false
	}
	a.hits.Add(1)
	return e.v, true
}

// Peek returns op's value and the request sequence it is held under,
// without forgetting it and without counting a hit or a miss. Peek on a
// nil Store finds nothing.
func (a *Store[V]) Peek(op string) (seq uint64, v V, ok bool) {
	if a == nil {
		return 0, v, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.m[op]
	return e.seq, e.v, ok
}

// DropIf forgets every entry whose value drop says to, and returns how
// many it forgot. It looks at every entry, under the Store's lock: for a
// sweep now and then, not for a hot path.
func (a *Store[V]) DropIf(drop func(V) bool) int {
	if a == nil {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for op, e := range a.m {
		if drop(e.v) {
			delete(a.m, op)
			a.bytes -= e.size
			n++
		}
	}
	return n
}

// Stats are how many Takes found their value and how many did not.
func (a *Store[V]) Stats() (hits, misses uint64) {
	if a == nil {
		return 0, 0
	}
	return a.hits.Load(), a.misses.Load()
}

// Len is how many entries are held, and their bytes.
func (a *Store[V]) Len() (entries, bytes int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.m), a.bytes
}
