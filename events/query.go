package events

// The query service answers on these subjects (a NATS micro service named
// airlock-query). Its request and answer shapes live here so that clients
// need nothing from the service's own package.
const (
	// QueryOpSubject answers an OpQuery with an Op.
	QueryOpSubject = QueryPrefix + ".op"
	// QueryOpsSubject answers a ListQuery with a ListResult.
	QueryOpsSubject = QueryPrefix + ".ops"
	// DefaultPage is the page size when a ListQuery names none.
	DefaultPage = 100
	// MaxPage bounds the page size of a ListQuery.
	MaxPage = 1000
)

// OpQuery asks for one op.
type OpQuery struct {
	OpID string `json:"op_id"`
	// Fresh asks for the op as of the question: an op the projection
	// does not hold is looked for again once the projection holds every
	// event the ops stream had stored when the question came (at most
	// projector.CaughtUpWait later). An approver asks so about a hold
	// it was just told of.
	Fresh bool `json:"fresh,omitempty"`
}

// ListQuery asks for a page of ops, optionally of one state.
type ListQuery struct {
	State string `json:"state,omitempty"`
	// Workspace, when set, keeps ops of that workspace only.
	Workspace string `json:"workspace,omitempty"`
	Cursor    string `json:"cursor,omitempty"`
	// Limit is the page size, 1 to MaxPage; 0 means DefaultPage.
	Limit int `json:"limit,omitempty"`
	// Newest lists the newest ops first; a page's Next continues with
	// older ones.
	Newest bool `json:"newest,omitempty"`
}

// ListResult is one page. Next is the cursor of the following page, empty
// on the last one.
type ListResult struct {
	Ops  []*Op  `json:"ops"`
	Next string `json:"next,omitempty"`
}

// QueryLiveSubject answers any request with a LiveStatus, after checking
// who subscribes to the live feed (airlock.v1.live.>) and turning the feed
// on if anyone does: a watcher subscribes first, then asks, and from the
// answer on sees every message the ops stream stores.
const QueryLiveSubject = QueryPrefix + ".live"

// LiveStatus says whether the ops stream republishes on the live feed
// (LivePrefix) now, and by which mode: "auto", on only while someone
// subscribes, or "on", always.
type LiveStatus struct {
	Live bool   `json:"live"`
	Mode string `json:"mode"`
}
