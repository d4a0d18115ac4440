package producers

import (
	"time"

	"github.com/airlock-dev/airlock/events"
)

// Terminal replies that reach the client while no Submit of their op
// waits are kept a while: an op granted after the Submit that saw it held
// returned runs at once, and its runner's reply (with the result) can
// arrive before the agent's retry begins to wait. The retry takes the
// kept reply instead of waiting ResultGrace for one that already came.
// The cache is bounded in entries, bytes and age.
const (
	// KeptReplies bounds the replies kept.
	KeptReplies = 1024
	// KeptReplyBytes bounds the bytes of the replies kept (a reply may
	// carry a result): the oldest go first.
	KeptReplyBytes = 8 << 20
	// KeptReplyAge is how long a reply is kept.
	KeptReplyAge = 10 * time.Second
)

type keptReply struct {
	r    events.Reply
	at   time.Time
	size int
}

type keptKey struct {
	op string
	at time.Time
}

// replyCache is the kept replies, by op id, oldest first in order. The
// client's mu guards it.
type replyCache struct {
	byOp  map[string]keptReply
	order []keptKey
	bytes int
}

func (c *replyCache) put(op string, r events.Reply, size int, now time.Time) {
	if size > KeptReplyBytes {
		return
	}
	if c.byOp == nil {
		c.byOp = map[string]keptReply{}
	}
	if old, ok := c.byOp[op]; ok {
		c.bytes -= old.size
	}
	c.byOp[op] = keptReply{r: r, at: now, size: size}
	c.order = append(c.order, keptKey{op, now})
	c.bytes += size
	c.evict(now)
}

// take returns op's kept reply and forgets it: it answers one Submit (a
// result erased on delivery is not handed out twice).
func (c *replyCache) take(op string, now time.Time) (events.Reply, bool) {
	c.evict(now)
	k, ok := c.byOp[op]
	if ok {
		delete(c.byOp, op)
		c.bytes -= k.size
	}
	return k.r, ok
}

// evict drops replies past their age, then the oldest while over a bound.
func (c *replyCache) evict(now time.Time) {
	n := 0
	for ; n < len(c.order); n++ {
		head := c.order[n]
		k, ok := c.byOp[head.op]
		if !ok || !k.at.Equal(head.at) {
			continue // replaced by a newer reply, or gone
		}
		if now.Sub(k.at) < KeptReplyAge && len(c.byOp) <= KeptReplies && c.bytes <= KeptReplyBytes {
			break
		}
		delete(c.byOp, head.op)
		c.bytes -= k.size
	}
	if n > 0 {
		c.order = append(c.order[:0], c.order[n:]...)
	}
}
