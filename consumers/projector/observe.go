package projector

import (
	"time"

	"github.com/airlock-dev/airlock/events"
)

// Transition is one event the projector applied: an op event that moved an
// op (or, for scrubbed, marked it), a rejected request, or a workspace's
// mode set or a policy loaded (no op: From, To and the names are empty).
type Transition struct {
	// Type is the event's type and Data its decoded body (*events.Decided,
	// *events.Rejected, ...).
	Type events.Type
	Data any
	// From and To are the op's states before and after; both empty for an
	// event that is not an op's.
	From, To events.State
	// Workspace, OpID and Tool name the op.
	Workspace, OpID, Tool string
	// At is the event's stored time; Since is when the op entered From
	// (its previous event's stored time), zero for an op's first event.
	At, Since time.Time
	// Granted is when the op's hold was granted; zero if it never was.
	Granted time.Time
}

// Observer is told what the projector applied, once the batch that holds
// it is committed, in stream order. Applied is called on the projector's
// goroutine and must return quickly; it must not keep ts, which the
// projector reuses.
type Observer interface {
	Applied(ts []Transition)
}

// observe records t for the Observer, if there is one.
func (p *Projector) observe(t Transition) {
	if p.cfg.Observer != nil {
		p.pending = append(p.pending, t)
	}
}

// transition describes an op event applied to rec, which was in state
// from since since.
func transition(typ events.Type, data any, from events.State, since time.Time, rec *events.Op) Transition {
	t := Transition{
		Type: typ, Data: data, From: from, To: rec.State, Since: since, At: rec.UpdatedAt,
		Workspace: rec.Workspace, OpID: rec.ID, Tool: rec.Tool,
	}
	if rec.Resolution == string(events.DecisionGrant) && rec.ResolvedAt != nil {
		t.Granted = *rec.ResolvedAt
	}
	return t
}

// flushObserved hands the committed transitions to the Observer.
func (p *Projector) flushObserved() {
	if len(p.pending) == 0 {
		return
	}
	p.cfg.Observer.Applied(p.pending)
	clear(p.pending)
	p.pending = p.pending[:0]
}
