package handoff

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTakeMatchesOpAndSequence(t *testing.T) {
	a := New(0, 0)
	a.Put("op_a", 7, json.RawMessage(`{"x":1}`))
	_, ok := a.Take("op_a", 8)
	assert.False(t, ok, "another request sequence of the op is not its args")
	args, ok := a.Take("op_a", 7)
	require.True(t, ok)
	assert.JSONEq(t, `{"x":1}`, string(args))
	_, ok = a.Take("op_a", 7)
	assert.False(t, ok, "taken once")
	_, ok = a.Take("op_b", 1)
	assert.False(t, ok)
	hits, misses := a.Stats()
	assert.Equal(t, uint64(1), hits)
	assert.Equal(t, uint64(3), misses)

	var none *Args
	none.Put("op_a", 1, nil)
	_, ok = none.Take("op_a", 1)
	assert.False(t, ok)
}

func TestBoundsEvictOldestFirst(t *testing.T) {
	a := New(3, 100)
	for i := range 5 {
		a.Put(fmt.Sprintf("op_%d", i), uint64(i), json.RawMessage(`{}`))
	}
	n, b := a.Len()
	assert.Equal(t, 3, n)
	assert.Equal(t, 6, b)
	for i := range 2 {
		_, ok := a.Take(fmt.Sprintf("op_%d", i), uint64(i))
		assert.False(t, ok, "op_%d was evicted", i)
	}
	for i := 2; i < 5; i++ {
		_, ok := a.Take(fmt.Sprintf("op_%d", i), uint64(i))
		assert.True(t, ok, "op_%d is held", i)
	}

	// Bytes: 40-byte args, 100 bytes at most.
	big := json.RawMessage(fmt.Sprintf(`{"s":"%032d"}`, 0))
	require.Len(t, big, 40)
	for i := range 4 {
		a.Put(fmt.Sprintf("big_%d", i), 1, big)
	}
	n, b = a.Len()
	assert.Equal(t, 2, n)
	assert.Equal(t, 80, b)
	_, ok := a.Take("big_3", 1)
	assert.True(t, ok)

	// Args over the byte bound are not kept at all.
	a.Put("huge", 1, make(json.RawMessage, 101))
	_, ok = a.Take("huge", 1)
	assert.False(t, ok)

	// Put again under another sequence: the new one counts once.
	a.Put("big_2", 2, big)
	n, b = a.Len()
	assert.Equal(t, 1, n)
	assert.Equal(t, 40, b)
}

// Entries evicted, never taken (another process's runner took the op),
// leave no keys behind either.
func TestQueueStaysBoundedWhenNothingIsTaken(t *testing.T) {
	a := New(100, 0)
	for i := range 1_000_000 {
		a.Put(fmt.Sprintf("op_%d", i), 1, json.RawMessage(`{}`))
	}
	assert.LessOrEqual(t, len(a.queue), 4*a.maxEntries)
	assert.LessOrEqual(t, cap(a.queue), 8*a.maxEntries+1024)
	n, _ := a.Len()
	assert.Equal(t, 100, n)
	_, ok := a.Take("op_999999", 1)
	assert.True(t, ok, "the newest is held")
	_, ok = a.Take("op_999899", 1)
	assert.False(t, ok, "the 101st newest was evicted")
}

// Entries taken before they are evicted leave no keys behind.
func TestQueueStaysBounded(t *testing.T) {
	a := New(10, 0)
	for i := range 100_000 {
		op := fmt.Sprintf("op_%d", i)
		a.Put(op, 1, json.RawMessage(`{}`))
		_, ok := a.Take(op, 1)
		require.True(t, ok)
	}
	assert.LessOrEqual(t, len(a.queue)-a.head, 2*a.maxEntries+1)
	n, b := a.Len()
	assert.Zero(t, n)
	assert.Zero(t, b)
}

func TestStoreCountsBytesBySize(t *testing.T) {
	type req struct{ body string }
	s := NewStore(0, 10, func(r req) int { return len(r.body) })
	s.Put("op_a", 1, req{"12345"})
	s.Put("op_b", 2, req{"123456"}) // 11 bytes in all: op_a goes
	s.Put("op_c", 3, req{"12345678901"})
	n, b := s.Len()
	assert.Equal(t, 1, n, "a value larger than the bound is not kept")
	assert.Equal(t, 6, b)
	_, ok := s.Take("op_a", 1)
	assert.False(t, ok)
	r, ok := s.Take("op_b", 2)
	require.True(t, ok)
	assert.Equal(t, "123456", r.body)
	n, b = s.Len()
	assert.Equal(t, 0, n)
	assert.Equal(t, 0, b)
}

// Peek shows an entry and its sequence and leaves it for Take.
func TestPeekLeavesTheEntry(t *testing.T) {
	a := New(0, 0)
	a.Put("op_a", 7, json.RawMessage(`{"x":1}`))
	seq, v, ok := a.Peek("op_a")
	require.True(t, ok)
	assert.Equal(t, uint64(7), seq)
	assert.JSONEq(t, `{"x":1}`, string(v))
	_, _, ok = a.Peek("op_b")
	assert.False(t, ok)
	_, ok = a.Take("op_a", 7)
	assert.True(t, ok, "still there after the peek")
	_, _, ok = a.Peek("op_a")
	assert.False(t, ok, "gone once taken")
	hits, misses := a.Stats()
	assert.Equal(t, uint64(1), hits, "peeks count neither")
	assert.Zero(t, misses)
	var none *Args
	_, _, ok = none.Peek("op_a")
	assert.False(t, ok)
}

// DropIf forgets what it is told to, gives back its bytes, and the bounds
// go on evicting the oldest of what is left.
func TestDropIfForgetsAndFreesBytes(t *testing.T) {
	a := New(3, 0)
	for i := range 3 {
		a.Put(fmt.Sprintf("op_%d", i), uint64(i), json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)))
	}
	_, before := a.Len()
	assert.Equal(t, 1, a.DropIf(func(v json.RawMessage) bool { return string(v) == `{"n":1}` }))
	entries, after := a.Len()
	assert.Equal(t, 2, entries)
	assert.Equal(t, before-len(`{"n":1}`), after)
	a.Put("op_3", 3, json.RawMessage(`{"n":3}`))
	a.Put("op_4", 4, json.RawMessage(`{"n":4}`))
	_, _, ok := a.Peek("op_0")
	assert.False(t, ok, "the oldest left is evicted once the bound is reached again")
	for _, op := range []string{"op_2", "op_3", "op_4"} {
		_, _, ok := a.Peek(op)
		assert.True(t, ok, op)
	}
	var none *Args
	assert.Zero(t, none.DropIf(func(json.RawMessage) bool { return true }))
}
