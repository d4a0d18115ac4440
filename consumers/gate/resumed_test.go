package gate

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The grants a gate resumed itself are remembered until taken, the
// oldest forgotten beyond maxResumed, so that entries never taken (their
// delivery went to another gate) do not stop it remembering new ones.
func TestResumedSetForgetsTheOldest(t *testing.T) {
	var r resumedSet
	for i := range maxResumed + 10 {
		r.add(fmt.Sprintf("op_%d", i), uint64(i))
	}
	assert.False(t, r.take("op_0", 0), "the oldest is forgotten")
	assert.False(t, r.take("op_9", 9))
	assert.True(t, r.take("op_10", 10))
	assert.False(t, r.take("op_10", 10), "taken once")
	last := fmt.Sprintf("op_%d", maxResumed+9)
	assert.False(t, r.take(last, 1), "another grant of the op is not this one")
	assert.True(t, r.take(last, maxResumed+9))
	assert.LessOrEqual(t, len(r.m), maxResumed)
}
