package events

import (
	"encoding/json"
	"strings"
	"time"
)

// Reply is what a request's Airlock-Reply-To subject receives: from the gate,
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
	// Result is a completed op's result: in the reply of the runner that
	// ran it, and in the gate's answer to a retry when Airlock holds the
	// key it is sealed to (--no-auth). An empty result is the JSON null,
	// never an absent field.
	Result json.RawMessage `json:"result,omitempty"`
	// Sealed is the result sealed to the requesting agent's key
	// (internal/seal): the gate's answer to a retry of a completed op
	// within the result's retention. Only that agent's seed opens it.
	Sealed []byte `json:"sealed_result,omitempty"`
	// KeptUntil and EraseOnDelivery say how long Airlock keeps the
	// result (see Completed); Erased why it no longer does.
	KeptUntil       *time.Time `json:"result_kept_until,omitempty"`
	EraseOnDelivery bool       `json:"result_erase_on_delivery,omitempty"`
	Erased          string     `json:"result_erased,omitempty"`
	// ResultDigest (sha256: of the compacted result) and ResultBytes (its
	// size) describe a completed op's result, on every reply that says
	// it completed, with or without Result.
	ResultDigest string `json:"result_digest,omitempty"`
	ResultBytes  int    `json:"result_bytes,omitempty"`
	// Hold describes the hold of a held op (Code APPROVAL_REQUIRED).
	Hold *HoldInfo `json:"hold,omitempty"`
	// Mode is the control an operator's mode command recorded.
	Mode *ModeSet `json:"mode,omitempty"`
}

// ValidReplyTo reports whether s may be answered as the Airlock-Reply-To
// of a request by agent: airlock.v1.reply.<agent>.<token>[.<token>...], at
// most 256 bytes, no wildcards or white space. Nothing else is answered, so
// a request cannot make Airlock publish anywhere else, nor send one agent's
// answers to another.
func ValidReplyTo(s, agent string) bool {
	// s has the prefix ReplyPrefix(agent), matched piece by piece: this
	// runs for every op, and the prefix need not be built.
	root := SubjectRoot + ".reply."
	n := len(root) + len(agent) + 1
	if !ValidName(agent) || len(s) <= n || len(s) > 256 || s[:len(root)] != root ||
		s[len(root):n-1] != agent || s[n-1] != '.' {
		return false
	}
	return validTokens(s[n:])
}

// ValidResponse reports whether s may be answered as the reply subject of
// a NATS request (a resolution, a control, a query): an _INBOX. subject, or
// the _R_. subject a service import gives a request from another account.
// Answers never go anywhere else, such as onto a stream's subjects.
func ValidResponse(s string) bool {
	for _, prefix := range []string{"_INBOX.", "_R_."} {
		if len(s) > len(prefix) && len(s) <= 256 && strings.HasPrefix(s, prefix) {
			return validTokens(s[len(prefix):])
		}
	}
	return false
}

func validTokens(s string) bool {
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
			return false
		}
	}
	return true
}

// StatusReply is the Reply that tells a submitter where its op stands
// after data: a terminal outcome (OutcomeReply) or a hold waiting for an
// approver; false for any other event.
func StatusReply(data any) (Reply, bool) {
	if h, ok := data.(*Held); ok {
		return Reply{
			OpID: h.OpID, State: StateHeld, Code: CodeApprovalRequired, Message: h.Reason,
			Hold: &HoldInfo{HoldID: h.HoldID, ArgsDigest: h.ArgsDigest, ExpiresAt: h.ExpiresAt, Reason: h.Reason},
		}, true
	}
	return OutcomeReply(data)
}

// OutcomeReply is the Reply that announces a terminal op event, and false
// for any other event. For completed it carries the result's digest and
// size, not the result, which no event holds.
func OutcomeReply(data any) (Reply, bool) {
	h, _ := IsOpEvent(data)
	r := Reply{OpID: h.OpID}
	switch d := data.(type) {
	case *Completed:
		r.State, r.ResultDigest, r.ResultBytes = StateCompleted, d.ResultDigest, d.ResultBytes
		r.KeptUntil, r.EraseOnDelivery = d.KeptUntil, d.EraseOnDelivery
	case *ResultErased:
		r.State, r.ResultDigest, r.ResultBytes, r.Erased = StateCompleted, d.ResultDigest, d.ResultBytes, d.Reason
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
