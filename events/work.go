package events

import (
	"encoding/json"
	"strings"
)

// WorkItem tells the executors of one tool that an op is ready. It is plain
// JSON on airlock.v1.work.<ws>.<tool>, at least once: the claim on the op's
// subject, not the work item, makes execution happen once.
type WorkItem struct {
	OpID      string `json:"op_id"`
	Workspace string `json:"workspace"`
	Agent     string `json:"agent"`
	Tool      string `json:"tool"`
	// RequestSeq locates the tool.requested message that carries the args.
	RequestSeq uint64 `json:"request_seq"`
	// ReadySeq is the op subject's sequence when it became ready: the
	// expected last sequence of the claim.
	ReadySeq uint64 `json:"ready_seq"`
	// ReplyTo is the request's Airlock-Reply-To inbox, if it had a valid
	// one: the executor sends the op's outcome there once it is stored.
	ReplyTo string `json:"reply_to,omitempty"`
}

// Reply is what a request's Airlock-Reply-To inbox receives: from the gate,
// the code a bad request was rejected with, a denial, or the current state
// of an op that already existed; from the executor, the terminal outcome
// once it is stored. A ready op gets no reply until it ends.
type Reply struct {
	OpID  string `json:"op_id,omitempty"`
	State State  `json:"state,omitempty"`
	// Existing is true when the request was a retry of an op that already
	// existed (within the dedupe window or long after it).
	Existing bool   `json:"existing,omitempty"`
	Code     Code   `json:"code,omitempty"`
	Message  string `json:"message,omitempty"`
	// Result is the stored result of a completed op.
	Result json.RawMessage `json:"result,omitempty"`
}

// ValidInbox reports whether s may be answered as an Airlock-Reply-To
// inbox: _INBOX.<tokens>, at most 256 bytes, no wildcards or white space.
// Nothing else is answered, so a request cannot make Airlock publish
// anywhere else.
func ValidInbox(s string) bool {
	const prefix = "_INBOX."
	if len(s) <= len(prefix) || len(s) > 256 || !strings.HasPrefix(s, prefix) {
		return false
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
			return false
		}
	}
	return true
}

// OutcomeReply is the Reply that announces a terminal op event, and false
// for any other event.
func OutcomeReply(data any) (Reply, bool) {
	h, _ := IsOpEvent(data)
	r := Reply{OpID: h.OpID}
	switch d := data.(type) {
	case *Completed:
		r.State, r.Result = StateCompleted, d.Result
	case *Failed:
		r.State, r.Code, r.Message = StateFailed, d.Code, d.Message
	case *Denied:
		r.State, r.Code, r.Message = StateDenied, d.Code, d.Reason
	case *Expired:
		r.State, r.Code, r.Message = StateExpired, CodeHoldExpired, "hold "+d.HoldID+" expired unresolved"
	case *Ambiguous:
		r.State, r.Code, r.Message = StateAmbiguous, d.Code, d.Known
	default:
		return Reply{}, false
	}
	return r, true
}
