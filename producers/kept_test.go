package producers

import (
	"fmt"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/stretchr/testify/assert"
)

// The kept replies are bounded in age, entries and bytes, oldest first.
func TestReplyCacheBounds(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	done := func(op string) events.Reply { return events.Reply{OpID: op, State: events.StateCompleted} }

	var c replyCache
	c.put("a", done("a"), 100, now)
	r, ok := c.take("a", now.Add(KeptReplyAge-time.Millisecond))
	assert.True(t, ok)
	assert.Equal(t, "a", r.OpID)
	_, ok = c.take("a", now)
	assert.False(t, ok, "taken once")
	assert.Zero(t, c.bytes)
	c.put("b", done("b"), 100, now)
	_, ok = c.take("b", now.Add(KeptReplyAge))
	assert.False(t, ok, "past its age")
	assert.Zero(t, c.bytes)
	assert.Empty(t, c.order)

	for i := range KeptReplies + 10 {
		op := fmt.Sprintf("op%d", i)
		c.put(op, done(op), 10, now)
	}
	assert.Len(t, c.byOp, KeptReplies)
	_, ok = c.take("op9", now)
	assert.False(t, ok, "the oldest went first")
	assert.Equal(t, 10*KeptReplies, c.bytes)
	_, ok = c.take("op10", now)
	assert.True(t, ok)

	c = replyCache{}
	c.put("big1", done("big1"), KeptReplyBytes/2, now)
	c.put("big2", done("big2"), KeptReplyBytes/2, now)
	c.put("big3", done("big3"), KeptReplyBytes/2, now)
	_, ok = c.take("big1", now)
	assert.False(t, ok, "over the byte bound: the oldest went")
	assert.Equal(t, KeptReplyBytes, c.bytes)
	_, ok = c.take("big3", now)
	assert.True(t, ok)
	c.put("huge", done("huge"), KeptReplyBytes+1, now)
	_, ok = c.take("huge", now)
	assert.False(t, ok, "a reply over the byte bound is not kept")

	// A newer reply of the same op replaces the older, once.
	c = replyCache{}
	c.put("a", done("a"), 100, now)
	c.put("a", events.Reply{OpID: "a", State: events.StateFailed}, 50, now.Add(time.Second))
	assert.Equal(t, 50, c.bytes)
	r, _ = c.take("a", now.Add(time.Second))
	assert.Equal(t, events.StateFailed, r.State)
	assert.Zero(t, c.bytes)
	c.evict(now.Add(time.Second + KeptReplyAge))
	assert.Empty(t, c.order, "stale places go as they come round")
}
