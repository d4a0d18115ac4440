package events

import (
	"fmt"
	"time"
)

// State is where an op stands in the op state machine.
type State string

// The op states. See docs/state-machine.md.
const (
	StateNew       State = ""
	StateReady     State = "ready"
	StateHeld      State = "held"
	StateGranted   State = "granted"
	StateExecuting State = "executing"
	StateCompleted State = "completed"
	StateFailed    State = "failed"
	StateDenied    State = "denied"
	StateExpired   State = "expired"
	StateAmbiguous State = "ambiguous"
)

// AllStates lists the states an op can be in once it exists.
var AllStates = []State{
	StateReady, StateHeld, StateGranted, StateExecuting,
	StateCompleted, StateFailed, StateDenied, StateExpired, StateAmbiguous,
}

// ParseState returns the state named s, or an error.
func ParseState(s string) (State, error) {
	for _, st := range AllStates {
		if string(st) == s {
			return st, nil
		}
	}
	return "", Errorf(CodeInvalidQuery, "unknown state %q", s)
}

// Terminal reports whether no event but scrubbed may follow.
func (s State) Terminal() bool {
	switch s {
	case StateCompleted, StateFailed, StateDenied, StateExpired, StateAmbiguous:
		return true
	}
	return false
}

// StateAfter is the state an op is in after a non-terminal event of type
// t; "" for a terminal event, whose outcome says more, and for scrubbed,
// which follows any terminal event.
func StateAfter(t Type) State {
	switch t {
	case TypeDecided:
		return StateReady
	case TypeHeld:
		return StateHeld
	case TypeGranted:
		return StateGranted
	case TypeClaimed, TypeStarted:
		return StateExecuting
	}
	return ""
}

// Op is the folded state of one op: what the projector stores and the query
// service answers. Apply is its only writer.
type Op struct {
	ID          string `json:"op_id"`
	Workspace   string `json:"workspace"`
	State       State  `json:"state"`
	Agent       string `json:"agent,omitempty"`
	Tool        string `json:"tool,omitempty"`
	Class       string `json:"class,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
	ArgsDigest  string `json:"args_digest,omitempty"`
	RequestSeq  uint64 `json:"request_seq,omitempty"`
	// Operands are the hashes, at the decision, of the files the call
	// touches, keyed by the digest of each path (see Summary.Operands).
	Operands   map[string]string `json:"operands,omitempty"`
	PolicyHash string            `json:"policy_hash,omitempty"`
	Reason     string            `json:"reason,omitempty"`
	HoldID     string            `json:"hold_id,omitempty"`
	// HoldExpiresAt is when a hold expires unresolved.
	HoldExpiresAt *time.Time `json:"hold_expires_at,omitempty"`
	// Approver names who resolved the hold, and Resolution how.
	Approver   string `json:"approver,omitempty"`
	Resolution string `json:"resolution,omitempty"`
	// ResolvedAt is when the hold was granted, denied or expired (the
	// stored time of that event).
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
	// Rule names the policy rule behind the newest decision.
	Rule string `json:"rule,omitempty"`
	// Attempt is the id of the newest claim; Attempts counts claims.
	Attempt  string `json:"attempt,omitempty"`
	Attempts int    `json:"attempts,omitempty"`
	// Started says that the newest claim's attempt has its started event:
	// it may have taken effect.
	Started bool `json:"started,omitempty"`
	// Instance and Host name the data dir and the machine of the newest
	// claim's runner, and ClaimedAt when it claimed: who an executing op
	// waits for.
	Instance  string     `json:"instance,omitempty"`
	Host      string     `json:"host,omitempty"`
	ClaimedAt *time.Time `json:"claimed_at,omitempty"`
	// ResultDigest and ResultBytes describe a completed op's result.
	// ResultKeptUntil is when the result, sealed to the agent that asked,
	// is erased (absent: not kept), ResultEraseOnDelivery whether it goes
	// once the agent has it, and ResultErased why it went (an Erased*
	// reason), once it did.
	ResultDigest          string     `json:"result_digest,omitempty"`
	ResultBytes           int        `json:"result_bytes,omitempty"`
	ResultKeptUntil       *time.Time `json:"result_kept_until,omitempty"`
	ResultEraseOnDelivery bool       `json:"result_erase_on_delivery,omitempty"`
	ResultErased          string     `json:"result_erased,omitempty"`
	// ResultSeq is the kept result's sequence in AIRLOCK_RESULTS (the
	// completed event's result_seq); 0 for a result kept on its
	// attempt's own subject, or none.
	ResultSeq uint64 `json:"result_seq,omitempty"`
	ErrorCode Code   `json:"error_code,omitempty"`
	Error     string `json:"error,omitempty"`
	Scrubbed  bool   `json:"scrubbed,omitempty"`
	// Version is the op subject's sequence of the last applied event: the
	// value the next transition must expect.
	Version uint64 `json:"version"`
	// FirstSeq is the stream sequence of the op's first event.
	FirstSeq  uint64    `json:"first_seq"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Apply folds one op event (the *T returned by DecodeData) into op. seq is
// the event's stream sequence, at its time. It returns an *Error with code
// INVALID_EVENT when the transition is not in the state machine; op is then
// unchanged.
func (op *Op) Apply(data any, seq uint64, at time.Time) error {
	next, err := op.next(data)
	if err != nil {
		return err
	}
	h := header(data)
	if op.State == StateNew {
		op.ID, op.Workspace, op.CreatedAt, op.FirstSeq = h.OpID, h.Workspace, at, seq
	} else if h.OpID != op.ID {
		return Errorf(CodeInvalidEvent, "event for op %s applied to op %s", h.OpID, op.ID)
	}
	switch d := data.(type) {
	case *Decided:
		op.summary(d.Request)
		op.PolicyHash, op.Reason, op.Rule = d.PolicyHash, d.Reason, d.Rule
	case *Held:
		op.summary(d.Request)
		op.PolicyHash, op.Reason, op.HoldID, op.Rule = d.PolicyHash, d.Reason, d.HoldID, d.Rule
		exp := d.ExpiresAt
		op.HoldExpiresAt = &exp
	case *Granted:
		op.Reason, op.Approver, op.Resolution = d.Reason, d.Approver, string(DecisionGrant)
		op.ResolvedAt = &at
	case *Denied:
		op.summary(d.Request)
		op.ErrorCode, op.Error, op.Rule = d.Code, d.Reason, d.Rule
		if d.PolicyHash != "" {
			op.PolicyHash = d.PolicyHash
		}
		if d.Actor != "" {
			op.Approver, op.Resolution = d.Actor, string(DecisionDeny)
		}
		if op.State == StateHeld {
			op.ResolvedAt = &at
		}
	case *Expired:
		op.ErrorCode, op.Error = CodeHoldExpired, "hold expired unresolved"
		op.ResolvedAt = &at
	case *Claimed:
		op.claim(d.Attempt, &d.Claim, at)
		op.Started = false
	case *Started:
		if d.Decision != nil {
			op.summary(d.Decision.Request)
			op.PolicyHash, op.Reason, op.Rule = d.Decision.PolicyHash, d.Decision.Reason, d.Decision.Rule
		}
		if d.Claim != nil {
			op.claim(d.Attempt, d.Claim, at)
		}
		op.Started = true
	case *Completed:
		op.ResultDigest, op.ResultBytes = d.ResultDigest, d.ResultBytes
		op.ResultKeptUntil, op.ResultEraseOnDelivery = d.KeptUntil, d.EraseOnDelivery
		op.ResultSeq = d.ResultSeq
	case *ResultErased:
		op.ResultErased = d.Reason
	case *Failed:
		op.ErrorCode, op.Error = d.Code, d.Message
	case *Ambiguous:
		op.ErrorCode, op.Error = d.Code, d.Known
	case *Scrubbed:
		op.Scrubbed = true
	}
	op.State = next
	op.Version = seq
	op.UpdatedAt = at
	return nil
}

// claim records an attempt's claim, made at at.
func (op *Op) claim(attempt string, c *Claim, at time.Time) {
	op.Attempt = attempt
	op.Attempts++
	op.Instance, op.Host = c.Instance, c.Host
	op.ClaimedAt = &at
}

func (op *Op) summary(s *Summary) {
	if s == nil {
		return
	}
	op.Agent, op.Tool, op.Class = s.Agent, s.Tool, s.Class
	op.Fingerprint, op.ArgsDigest, op.RequestSeq, op.Operands = s.Fingerprint, s.ArgsDigest, s.RequestSeq, s.Operands
}

// next is the transition table.
func (op *Op) next(data any) (State, error) {
	from := op.State
	bad := func(name string) (State, error) {
		if from == StateNew {
			return "", Errorf(CodeInvalidEvent, "%s cannot start an op", name)
		}
		return "", Errorf(CodeInvalidEvent, "%s not allowed in state %s", name, from)
	}
	first := func(s *Summary) bool { return from == StateNew && s != nil }
	switch d := data.(type) {
	case *Decided:
		if first(d.Request) || (from == StateGranted && d.Request != nil) {
			return StateReady, nil
		}
		return bad("decided")
	case *Held:
		if first(d.Request) {
			return StateHeld, nil
		}
		return bad("held")
	case *Denied:
		if first(d.Request) || from == StateHeld || from == StateGranted {
			return StateDenied, nil
		}
		return bad("denied")
	case *Granted:
		if from == StateHeld {
			return StateGranted, nil
		}
		return bad("granted")
	case *Expired:
		if from == StateHeld {
			return StateExpired, nil
		}
		return bad("expired")
	case *Claimed:
		if from == StateReady || (from == StateExecuting && d.Recovers == op.Attempt) {
			return StateExecuting, nil
		}
		return bad("claimed")
	case *Started:
		if d.Decision != nil {
			// Allowed and started at once by the gate's own process, as
			// the op's first event (ADR 0025) or as the resume of its
			// grant (ADR 0029): as decided would, then a first claim and
			// its start.
			decides := first(d.Decision.Request) || (from == StateGranted && d.Decision.Request != nil)
			if decides && d.Attempt != "" && d.Claim != nil && d.Claim.Recovers == "" && d.Decision.OpHeader == d.OpHeader {
				return StateExecuting, nil
			}
			return bad("started with a decision")
		}
		if d.Claim != nil {
			// Claims the op and starts the attempt at once: as claimed
			// would, then started.
			if from == StateReady || (from == StateExecuting && d.Claim.Recovers == op.Attempt) {
				return StateExecuting, nil
			}
			return bad("started")
		}
		if from == StateExecuting && d.Attempt == op.Attempt && !op.Started {
			return StateExecuting, nil
		}
		return bad("started")
	case *Completed:
		if from == StateExecuting && d.Attempt == op.Attempt {
			return StateCompleted, nil
		}
		return bad("completed")
	case *Failed:
		if from == StateReady || (from == StateExecuting && d.Attempt == op.Attempt) {
			return StateFailed, nil
		}
		return bad("failed")
	case *Ambiguous:
		if from == StateExecuting && d.Attempt == op.Attempt {
			return StateAmbiguous, nil
		}
		return bad("ambiguous")
	case *Scrubbed:
		if from.Terminal() && !op.Scrubbed {
			return from, nil
		}
		return bad("scrubbed")
	case *ResultErased:
		if from == StateCompleted && op.ResultKeptUntil != nil && op.ResultErased == "" && d.Reason != "" {
			return from, nil
		}
		return bad("result_erased")
	}
	return "", Errorf(CodeInvalidEvent, "%T is not an op event", data)
}

// header returns the OpHeader of an op event, or a zero one.
func header(data any) OpHeader {
	if e, ok := data.(interface{ opHeader() OpHeader }); ok {
		return e.opHeader()
	}
	return OpHeader{}
}

// String renders the op in one line for logs.
func (op *Op) String() string {
	return fmt.Sprintf("%s %s/%s %s", op.ID, op.Workspace, op.Tool, op.State)
}
