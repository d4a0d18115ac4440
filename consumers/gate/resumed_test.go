package gate

import (
	"context"
	"fmt"
	"testing"
	"time"

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
