package events

import (
	"encoding/json"
	"time"
)

// Type is a versioned CloudEvents type: dev.airlock.<noun>.<verb>.v1.
type Type string

// The event types of the op state machine.
const (
	TypeRequested Type = "dev.airlock.tool.requested.v1"
	TypeRejected  Type = "dev.airlock.request.rejected.v1"
	TypeDecided   Type = "dev.airlock.op.decided.v1"
	TypeHeld      Type = "dev.airlock.op.held.v1"
	TypeGranted   Type = "dev.airlock.op.granted.v1"
	TypeDenied    Type = "dev.airlock.op.denied.v1"
	TypeExpired   Type = "dev.airlock.op.expired.v1"
	TypeClaimed   Type = "dev.airlock.op.claimed.v1"
	TypeStarted   Type = "dev.airlock.op.started.v1"
	TypeCompleted Type = "dev.airlock.op.completed.v1"
	TypeFailed    Type = "dev.airlock.op.failed.v1"
	TypeAmbiguous Type = "dev.airlock.op.ambiguous.v1"
	TypeScrubbed  Type = "dev.airlock.op.scrubbed.v1"
	// TypeResultErased records that a completed op's kept result was
	// erased: its retention ended, it was delivered (erase on delivery),
	// or its workspace kept too many bytes.
	TypeResultErased Type = "dev.airlock.op.result_erased.v1"
	// TypeModeSet and TypePolicyLoaded are not op events: they record the
	// controls and policy the gate decides under.
	TypeModeSet      Type = "dev.airlock.mode.set.v1"
	TypePolicyLoaded Type = "dev.airlock.policy.loaded.v1"
)

// AllTypes lists every event type.
var AllTypes = []Type{
	TypeRequested, TypeRejected, TypeDecided, TypeHeld, TypeGranted, TypeDenied,
	TypeExpired, TypeClaimed, TypeStarted, TypeCompleted, TypeFailed, TypeAmbiguous, TypeScrubbed,
	TypeResultErased, TypeModeSet, TypePolicyLoaded,
}

// Known reports whether t is one of AllTypes.
func (t Type) Known() bool {
	for _, k := range AllTypes {
		if k == t {
			return true
		}
	}
	return false
}

// First reports whether an event of type t may be an op's first event
// (ADR 0025 made started one).
func (t Type) First() bool {
	switch t {
	case TypeDecided, TypeHeld, TypeDenied, TypeStarted:
		return true
	}
	return false
}

// Short is the verb of the type: "decided" for dev.airlock.op.decided.v1.
func (t Type) Short() string {
	s := string(t)
	const prefix = "dev.airlock."
	if len(s) < len(prefix)+3 {
		return s
	}
	s = s[len(prefix) : len(s)-3]
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '.' {
			return s[i+1:]
		}
	}
	return s
}

// Summary describes the request behind an op. It is carried by the first
// event on an op's subject, so the op stream alone tells what the op is. It
// holds the args digest, never the args.
type Summary struct {
	Fingerprint    string `json:"fingerprint"`
	Agent          string `json:"agent"`
	Tool           string `json:"tool"`
	Class          string `json:"class"`
	ArgsDigest     string `json:"args_digest"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// RequestSeq is the stream sequence of the tool.requested message that
	// carries the args.
	RequestSeq uint64 `json:"request_seq"`
	// Operands are the content hashes of the workspace files the call will
	// touch, as the gate found them when it decided, keyed by the digest of
	// each file's path (OperandKeys: the paths are argument text): the
	// executor takes them again after its claim and runs nothing if one
	// changed.
	Operands map[string]string `json:"operands,omitempty"`
}

// OpHeader is the part every op event carries.
type OpHeader struct {
	OpID      string `json:"op_id"`
	Workspace string `json:"workspace"`
}

func (h OpHeader) opHeader() OpHeader { return h }

// IsOpEvent reports whether data (from DecodeData) is an op event, and
// returns its header.
func IsOpEvent(data any) (OpHeader, bool) {
	h := header(data)
	return h, h.OpID != ""
}

// Decided records that policy allows the op to run now: requested -> ready,
// or granted -> ready on resume. It always carries the request summary, so
// an executor needs nothing else to find the args, and it is the work item:
// executors consume decided events of their tool.
type Decided struct {
	OpHeader
	Request    *Summary `json:"request,omitempty"`
	PolicyHash string   `json:"policy_hash"`
	Reason     string   `json:"reason"`
	// Rule names the policy rule that decided, if one did.
	Rule string `json:"rule,omitempty"`
	// Mode is the permission mode the decision was made in.
	Mode string `json:"mode,omitempty"`
	// Results is how long the op's result is kept for the agent that
	// asked, as the policy decided; absent in events of versions that
	// kept no results (the runner then keeps it DefaultResultTTL).
	Results *Retention `json:"results,omitempty"`
}

// Held records that the op waits for an approver.
type Held struct {
	OpHeader
	Request    *Summary  `json:"request,omitempty"`
	HoldID     string    `json:"hold_id"`
	ArgsDigest string    `json:"args_digest"`
	ExpiresAt  time.Time `json:"expires_at"`
	PolicyHash string    `json:"policy_hash"`
	Reason     string    `json:"reason"`
	Rule       string    `json:"rule,omitempty"`
	Mode       string    `json:"mode,omitempty"`
}

// Granted records an approver's grant of a hold. Approver is the
// principal whose credential published the grant, never a field the
// approver filled in; ApproverKey is that credential's public key.
type Granted struct {
	OpHeader
	HoldID      string `json:"hold_id"`
	ArgsDigest  string `json:"args_digest"`
	Approver    string `json:"approver"`
	ApproverKey string `json:"approver_key,omitempty"`
	Reason      string `json:"reason"`
	// Approval is the approver's signed statement, checked by the gate
	// (ADR 0021); omitted where the approver has no key (--no-auth).
	Approval *Approval `json:"approval,omitempty"`
}

// Denied records a denial by policy, by an approver, or on resume. Terminal.
type Denied struct {
	OpHeader
	Request    *Summary `json:"request,omitempty"`
	Code       Code     `json:"code"`
	Reason     string   `json:"reason"`
	PolicyHash string   `json:"policy_hash,omitempty"`
	Rule       string   `json:"rule,omitempty"`
	Mode       string   `json:"mode,omitempty"`
	// Actor and ActorKey name the approver who denied a hold; HoldID the
	// hold.
	Actor    string `json:"actor,omitempty"`
	ActorKey string `json:"actor_key,omitempty"`
	HoldID   string `json:"hold_id,omitempty"`
	// Approval is the approver's signed statement of a denial of a hold
	// (ADR 0021).
	Approval *Approval `json:"approval,omitempty"`
}

// Expired records that a hold passed its expiry unresolved. Terminal.
type Expired struct {
	OpHeader
	HoldID string `json:"hold_id"`
}

// Claimed records an executor taking the op, before any side effect.
// Since ADR 0023 the runner claims and starts an attempt in one append, a
// started event that carries its Claim; claimed events are still read,
// as versions before it wrote them.
type Claimed struct {
	OpHeader
	Attempt string `json:"attempt"`
	Claim
}

// Claim says who took an op for an attempt: in a claimed event, or in
// the started event that claims the op and starts the attempt at once.
type Claim struct {
	Executor string `json:"executor"`
	// Recovers names the attempt this claim takes over after its executor
	// was lost; empty on a first claim.
	Recovers string `json:"recovers,omitempty"`
	// WorkSeq and Delivery identify the delivery of the decided event that
	// made the claim (its stream sequence and delivery count), so a later
	// delivery can tell a lost claim from a live one.
	WorkSeq  uint64 `json:"work_seq,omitempty"`
	Delivery uint64 `json:"delivery,omitempty"`
	// Consumer is the durable consumer that delivered it: a claim made
	// through another consumer is never taken for a lost one.
	Consumer string `json:"consumer,omitempty"`
	// Runner names the runner process that made the claim: when its
	// decided event is delivered to another runner, the claim is lost.
	Runner string `json:"runner,omitempty"`
	// Instance names the Airlock instance (its data dir) that made the
	// claim, and Host the host it ran on: a recovery of the attempt by the
	// same instance may trust that instance's own records of it, a
	// recovery anywhere else may not (docs/state-machine.md).
	Instance string `json:"instance,omitempty"`
	Host     string `json:"host,omitempty"`
}

// Started records that an attempt is about to take effect: the runner
// calls the executor only once it is stored. With a Claim (ADR 0023) it
// also takes the op for the attempt, appended against the decided event
// (or, for a recovery, the lost attempt's newest event); without one it
// follows the attempt's claimed event. With a Decision it is the op's
// first event (ADR 0025): the gate allowed the op and its own process
// started it, without a decided event. An attempt without a started
// event never reached its side effect, which every process of a
// deployment can read; an attempt with one may have taken effect, and is
// run again only on evidence that it did not.
type Started struct {
	OpHeader
	Attempt string `json:"attempt"`
	// Evidence is what the executor recorded, before its effect, about
	// what that effect will be (apply_patch: each file's pre- and
	// post-image hash, keyed by path digest), so that a recovery in any
	// process can judge the attempt; never argument text. At most
	// MaxEvidenceBytes.
	Evidence json.RawMessage `json:"evidence,omitempty"`
	// Claim is the claim this event makes; nil when a claimed event
	// made it.
	Claim *Claim `json:"claim,omitempty"`
	// Decision is the gate's decision, as a decided event would carry it,
	// when this event is the op's first; nil otherwise. Its op and
	// workspace are the event's own.
	Decision *Decided `json:"decision,omitempty"`
}

// Completed records that the op ran and returned a result. Terminal. The
// result itself is never stored: the event carries its digest and size,
// and the result travels only in the reply to the request (core NATS).
type Completed struct {
	OpHeader
	Attempt string `json:"attempt"`
	// ResultDigest is the sha256: digest of the compacted result, and
	// ResultBytes its size in bytes.
	ResultDigest string `json:"result_digest"`
	ResultBytes  int    `json:"result_bytes"`
	DurationMS   int64  `json:"duration_ms"`
	Recovered    bool   `json:"recovered,omitempty"`
	// KeptUntil is when the result, sealed to the requesting agent and
	// stored in AIRLOCK_RESULTS before this event, is erased; absent when
	// it was not kept. EraseOnDelivery erases it as soon as the agent
	// has it.
	KeptUntil       *time.Time `json:"result_kept_until,omitempty"`
	EraseOnDelivery bool       `json:"result_erase_on_delivery,omitempty"`
	// ResultSeq is the kept result's sequence in AIRLOCK_RESULTS; absent
	// when it was not kept, or was kept by a version that stored each
	// result on a subject of its own (AttemptResultSubject).
	ResultSeq uint64 `json:"result_seq,omitempty"`
}

// Failed records that the op ran, or could not run, and failed. Terminal.
type Failed struct {
	OpHeader
	Attempt string `json:"attempt,omitempty"`
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

// Ambiguous records that an attempt may or may not have taken effect and
// will not be retried. Terminal.
type Ambiguous struct {
	OpHeader
	Attempt string `json:"attempt"`
	Code    Code   `json:"code"`
	Known   string `json:"known"`
	// Instance and Host name the Airlock instance and host that held the
	// attempt, when the op ends ambiguous because that instance was lost.
	Instance string `json:"instance,omitempty"`
	Host     string `json:"host,omitempty"`
}

// Scrubbed records that the op's argument plaintext was erased.
type Scrubbed struct {
	OpHeader
	RequestSeq uint64 `json:"request_seq"`
}

// ResultErased records that a completed op's kept result was erased; the
// digest and size of what was erased stay in the log.
type ResultErased struct {
	OpHeader
	// Reason is ErasedExpired, ErasedDelivered or ErasedEvicted.
	Reason       string `json:"reason"`
	ResultDigest string `json:"result_digest"`
	ResultBytes  int    `json:"result_bytes"`
}

// Why a result was erased.
const (
	ErasedExpired   = "expired"   // its retention ended
	ErasedDelivered = "delivered" // erase on delivery, and the agent has it
	ErasedEvicted   = "evicted"   // its workspace kept more bytes than allowed, and it was the oldest
)

// Rejected records a request the gate refused as bad input.
type Rejected struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// Subject and RequestSeq locate the refused message.
	Subject    string `json:"subject"`
	RequestSeq uint64 `json:"request_seq"`
	// RequestID is the refused event's ce-id, when it had one.
	RequestID string `json:"request_id,omitempty"`
	Size      int    `json:"size"`
	Digest    string `json:"digest"`
}

// NewPayload returns a pointer to the zero data struct for an event type, or
// nil for an unknown type.
func NewPayload(t Type) any {
	switch t {
	case TypeRequested:
		return new(Request)
	case TypeRejected:
		return new(Rejected)
	case TypeDecided:
		return new(Decided)
	case TypeHeld:
		return new(Held)
	case TypeGranted:
		return new(Granted)
	case TypeDenied:
		return new(Denied)
	case TypeExpired:
		return new(Expired)
	case TypeClaimed:
		return new(Claimed)
	case TypeStarted:
		return new(Started)
	case TypeCompleted:
		return new(Completed)
	case TypeFailed:
		return new(Failed)
	case TypeAmbiguous:
		return new(Ambiguous)
	case TypeScrubbed:
		return new(Scrubbed)
	case TypeResultErased:
		return new(ResultErased)
	case TypeModeSet:
		return new(ModeSet)
	case TypePolicyLoaded:
		return new(PolicyLoaded)
	}
	return nil
}
