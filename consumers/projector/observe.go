package projector

import (
	"time"

	"github.com/airlock-dev/airlock/events"
)

// Transition is one event the projector applied (events.Transition).
type Transition = events.Transition

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
