package gate

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"

	"github.com/stretchr/testify/assert"
)

// The grants a gate resumed itself are remembered until taken, the
// oldest forgotten beyond maxResumed, so that entries never taken (their
// delivery went to another gate) do not stop it remembering new ones.
func TestResumedSetForgetsTheOldest(t *testing.T) {
	var r resumedSet
	ctx := context.Background()
	for i := range maxResumed + 10 {
		op := fmt.Sprintf("op_%d", i)
		r.end(op, r.begin(op, uint64(i)), true)
	}
	assert.False(t, r.take(ctx, "op_0", 0), "the oldest is forgotten")
	assert.False(t, r.take(ctx, "op_9", 9))
	assert.True(t, r.take(ctx, "op_10", 10))
	assert.False(t, r.take(ctx, "op_10", 10), "taken once")
	last := fmt.Sprintf("op_%d", maxResumed+9)
	assert.False(t, r.take(ctx, last, 1), "another grant of the op is not this one")
	assert.True(t, r.take(ctx, last, maxResumed+9))
	assert.LessOrEqual(t, len(r.m), maxResumed)
}

// A delivery of a grant this gate is resuming waits for that resume: it
// is taken (and acked) if the resume appended, and resumes the grant
// itself if the resume failed or did not end in time.
func TestResumedSetDeliveryWaitsForTheResume(t *testing.T) {
	ctx := context.Background()
	for _, ok := range []bool{true, false} {
		var r resumedSet
		e := r.begin("op_1", 7)
		took := make(chan bool, 1)
		go func() { took <- r.take(ctx, "op_1", 7) }()
		select {
		case <-took:
			t.Fatal("the delivery did not wait for the resume under way")
		case <-time.After(50 * time.Millisecond):
		}
		r.end("op_1", e, ok)
		assert.Equal(t, ok, <-took, "resume ok=%v", ok)
		assert.False(t, r.take(ctx, "op_1", 7), "nothing left to take (ok=%v)", ok)
	}

	var r resumedSet
	r.begin("op_2", 3) // never ends
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	assert.False(t, r.take(short, "op_2", 3), "a resume that does not end in time leaves the grant to its delivery")
}

// The requests a gate kept of holds that expired without being resolved
// through it are forgotten by the sweep; those of pending holds stay.
func TestExpiredHoldsAreForgotten(t *testing.T) {
	g := &Gate{holding: newHolding()}
	now := time.Now()
	for i, expires := range []time.Time{now.Add(-time.Second), now, now.Add(time.Minute)} {
		op := fmt.Sprintf("op_%d", i)
		g.holding.Put(op, uint64(i+1), heldRequest{
			req:  &events.Request{Workspace: "w", Agent: "a", Tool: "t", Args: json.RawMessage(`{"i":` + fmt.Sprint(i) + `}`)},
			held: &events.Held{OpHeader: events.OpHeader{OpID: op, Workspace: "w"}, ExpiresAt: expires}, heldSeq: uint64(i + 10),
		})
	}
	// A request kept without its held event (none known) is not dropped.
	g.holding.Put("op_x", 9, heldRequest{req: &events.Request{Workspace: "w", Agent: "a", Tool: "t", Args: json.RawMessage(`{}`)}})
	assert.Equal(t, 2, g.dropExpiredHolds(now), "the hold past its expiry and the one at it")
	for op, kept := range map[string]bool{"op_0": false, "op_1": false, "op_2": true, "op_x": true} {
		_, _, ok := g.holding.Peek(op)
		assert.Equal(t, kept, ok, op)
	}
	entries, bytes := g.holding.Len()
	assert.Equal(t, 2, entries)
	assert.Positive(t, bytes)
	assert.Zero(t, g.dropExpiredHolds(now), "nothing more")
}
