package producers

import (
	"encoding/json"
	"testing"

	"github.com/airlock-dev/airlock/events"
	"github.com/stretchr/testify/assert"
)

const waiterOp = "op_0123456789abcdef0123456789abcdef"

func completedEvent() *events.Completed {
	return &events.Completed{
		OpHeader: events.OpHeader{OpID: waiterOp, Workspace: "w"}, Attempt: "a",
		ResultDigest: events.Digest([]byte(`{"r":1}`)), ResultBytes: 7,
	}
}

// A completed event read from the stream holds no result: the wait goes
// on for the runner's reply, which brings it.
func TestWaiterTakesTheResultFromTheReply(t *testing.T) {
	w := newWaiter(waiterOp, false)
	w.event(events.TypeCompleted, completedEvent())
	_, _, done := w.result()
	assert.False(t, done, "the reply may still bring the result")
	select {
	case <-w.completed:
	default:
		t.Fatal("await is not told to start the grace")
	}
	w.reply(events.Reply{OpID: waiterOp, State: events.StateCompleted, Result: json.RawMessage(`{"r":1}`),
		ResultDigest: events.Digest([]byte(`{"r":1}`)), ResultBytes: 7})
	o, err, done := w.result()
	assert.True(t, done)
	assert.NoError(t, err)
	assert.JSONEq(t, `{"r":1}`, string(o.Result))
	assert.False(t, w.settleUnresulted(), "already settled")
}

// Without a reply, the grace ends the wait with the digest and size.
func TestWaiterSettlesWithoutTheResult(t *testing.T) {
	w := newWaiter(waiterOp, false)
	w.event(events.TypeCompleted, completedEvent())
	assert.True(t, w.settleUnresulted())
	o, err, done := w.result()
	assert.True(t, done)
	assert.NoError(t, err)
	assert.Equal(t, events.StateCompleted, o.State)
	assert.Nil(t, o.Result)
	assert.Equal(t, completedEvent().ResultDigest, o.ResultDigest)
	assert.Equal(t, 7, o.ResultBytes)
}

// The gate's answer to a retry of an op that had completed says so
// (existing): no result is coming, and the wait ends at once.
func TestWaiterEndsOnAnExistingCompletedOp(t *testing.T) {
	w := newWaiter(waiterOp, false)
	w.reply(events.Reply{OpID: waiterOp, State: events.StateCompleted, Existing: true,
		ResultDigest: completedEvent().ResultDigest, ResultBytes: 7})
	o, _, done := w.result()
	assert.True(t, done)
	assert.Nil(t, o.Result)
	assert.Equal(t, completedEvent().ResultDigest, o.ResultDigest)
}

// A read of the stream that began before the terminal reply arrived (the
// op's claimed event) does not overwrite the outcome once it is final.
func TestWaiterKeepsTheFinalOutcome(t *testing.T) {
	w := newWaiter(waiterOp, false)
	w.reply(events.Reply{OpID: waiterOp, State: events.StateAmbiguous, Code: events.CodeAmbiguous, Message: "no answer"})
	w.event(events.TypeClaimed, &events.Claimed{OpHeader: events.OpHeader{OpID: waiterOp, Workspace: "w"}, Attempt: "a"})
	o, err, done := w.result()
	assert.True(t, done)
	assert.NoError(t, err)
	assert.Equal(t, events.StateAmbiguous, o.State)
	assert.Equal(t, events.CodeAmbiguous, o.Code)
}

// Waiting through a hold keeps the hold's outcome for a wait that runs
// out, and does not ask for a read of the op each time the read says
// held (that would read the stream back to back for the whole hold).
func TestWaiterThroughHoldsDoesNotSpin(t *testing.T) {
	w := newWaiter(waiterOp, true)
	held := &events.Held{OpHeader: events.OpHeader{OpID: waiterOp, Workspace: "w"}, HoldID: "hold_1", ArgsDigest: "sha256:a", Reason: "r"}
	for range 3 {
		w.event(events.TypeHeld, held)
		select {
		case <-w.poked:
			t.Fatal("a held read asks for another read")
		default:
		}
	}
	o, _, done := w.result()
	assert.False(t, done, "the wait goes on through the hold")
	assert.Equal(t, events.CodeApprovalRequired, o.Code)
	assert.Equal(t, "hold_1", o.HoldID)
	w.reply(events.Reply{OpID: waiterOp, State: events.StateCompleted, Result: json.RawMessage(`{"r":1}`),
		ResultDigest: events.Digest([]byte(`{"r":1}`)), ResultBytes: 7})
	o, _, done = w.result()
	assert.True(t, done)
	assert.Equal(t, events.StateCompleted, o.State)
	assert.Empty(t, o.HoldID)

	// Without it, the hold ends the wait.
	w = newWaiter(waiterOp, false)
	w.event(events.TypeHeld, held)
	_, _, done = w.result()
	assert.True(t, done)
}
