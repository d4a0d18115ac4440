package events

import "time"

// Transition is one event the projector applied: an op event that moved
// an op (or, for scrubbed and result_erased, marked it), a rejected
// request, or a workspace's mode set or a policy loaded (no op: From, To
// and the names are empty). Observers of the projection (metrics) take
// it.
type Transition struct {
	// Type is the event's type and Data its decoded body (*events.Decided,
	// *events.Rejected, ...).
	Type Type
	Data any
	// From and To are the op's states before and after; both empty for an
	// event that is not an op's.
	From, To State
	// Workspace, OpID and Tool name the op.
	Workspace, OpID, Tool string
	// At is the event's stored time; Since is when the op entered From
	// (its previous event's stored time), zero for an op's first event.
	At, Since time.Time
	// Granted is when the op's hold was granted; zero if it never was.
	Granted time.Time
}
