package producers

import (
	"sync"
	"time"

	"github.com/airlock-dev/airlock/events"
)

// waiter follows one op for one Submit call.
type waiter struct {
	opID  string
	done  chan struct{} // closed at a terminal outcome or a rejection
	poked chan struct{} // asks await to read the op's newest event
	// completed is signalled when the op is known to have completed but
	// its result has not arrived: only the runner's reply carries it, and
	// await gives that reply a short grace before it settles without.
	completed chan struct{}

	mu      sync.Mutex
	outcome Outcome
	err     error
	closed  bool
	// unresulted is the completed outcome, without its result, that ends
	// the wait if no reply brings the result.
	unresulted *Outcome
	// throughHolds keeps waiting when the op is held (WithWaitThroughHolds).
	throughHolds bool
	// since is when the wait began: a reply the runner sent before it
	// went to whoever waited then.
	since time.Time
}

func newWaiter(opID string, throughHolds bool) *waiter {
	return &waiter{
		opID: opID, done: make(chan struct{}), poked: make(chan struct{}, 1),
		completed: make(chan struct{}, 1), outcome: Outcome{OpID: opID}, throughHolds: throughHolds,
		since: time.Now(),
	}
}

func (w *waiter) poke() {
	select {
	case w.poked <- struct{}{}:
	default:
	}
}

// result returns the outcome so far and whether it is final.
func (w *waiter) result() (Outcome, error, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.outcome, w.err, w.closed
}

func (w *waiter) finish() {
	if !w.closed {
		w.closed = true
		close(w.done)
	}
}

// settleUnresulted ends the wait with the completed outcome that came
// without its result, if there is one; it reports whether it did.
func (w *waiter) settleUnresulted() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.unresulted == nil {
		return false
	}
	w.outcome = *w.unresulted
	w.finish()
	return true
}

// event folds one op event into the outcome: a terminal event ends the
// wait with the same outcome a reply would carry, except that a completed
// event, which holds no result, waits for the runner's reply a little.
func (w *waiter) event(t events.Type, data any) {
	if r, ok := events.StatusReply(data); ok {
		w.reply(r)
		return
	}
	if st := events.StateAfter(t); st != "" {
		w.mu.Lock()
		// A read of the stream that began before the terminal outcome
		// arrived must not overwrite it.
		if !w.closed {
			w.outcome.State = st
		}
		w.mu.Unlock()
	}
}

// reply takes an answer on the request's inbox: a rejection or a terminal
// outcome ends the wait; a retry of an existing op that is not terminal asks
// for a read of the op's newest event.
func (w *waiter) reply(r events.Reply) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	if r.OpID != "" && r.OpID != w.opID {
		return // not about this op: no answer from Airlock looks like that
	}
	switch {
	case r.OpID == "" && r.Code != "":
		w.err = &events.Error{Code: r.Code, Message: r.Message}
		w.finish()
	case r.State == events.StateCompleted && r.Result == nil && r.Sealed == nil && !r.Existing:
		// Read from the stream, or a runner's reply that holds the stored
		// outcome only: the reply of the runner that ran it may still be
		// on its way with the result. (existing: the gate says the op
		// had ended before this request: its answer has the result if
		// it is kept, and no other is coming.)
		o := outcomeOf(w.opID, r)
		w.unresulted = &o
		w.outcome.State = r.State
		select {
		case w.completed <- struct{}{}:
		default:
		}
	case r.State.Terminal():
		w.outcome = outcomeOf(w.opID, r)
		w.finish()
	case r.State == events.StateHeld && r.Hold != nil:
		exp := r.Hold.ExpiresAt
		w.outcome = Outcome{
			OpID: w.opID, State: r.State, Code: r.Code, Message: r.Message,
			HoldID: r.Hold.HoldID, ArgsDigest: r.Hold.ArgsDigest, HoldExpiresAt: &exp,
		}
		if w.throughHolds {
			// Wait on through the grant: the hold's outcome is what a
			// wait that runs out returns. No poke: the poll's ticker
			// reads the op again, and the runner replies once it ran.
			return
		}
		w.finish()
	default:
		if r.State != "" {
			w.outcome.State = r.State
		}
		w.poke()
	}
}

// op takes the outcome from the projection, for a terminal op.
func (w *waiter) op(op *events.Op) {
	if !op.State.Terminal() {
		return
	}
	w.reply(events.Reply{
		OpID: op.ID, State: op.State, ResultDigest: op.ResultDigest, ResultBytes: op.ResultBytes,
		Code: op.ErrorCode, Message: op.Error,
		KeptUntil: op.ResultKeptUntil, EraseOnDelivery: op.ResultEraseOnDelivery, Erased: op.ResultErased,
	})
}

// outcomeOf is the outcome a terminal reply says.
func outcomeOf(opID string, r events.Reply) Outcome {
	return Outcome{
		OpID: opID, State: r.State, Result: r.Result, ResultDigest: r.ResultDigest, ResultBytes: r.ResultBytes,
		Code: r.Code, Message: r.Message, ResultKeptUntil: r.KeptUntil,
		sealed: r.Sealed, eraseOnDelivery: r.EraseOnDelivery, erased: r.Erased,
	}
}
