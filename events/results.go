package events

import (
	"encoding/json"
	"fmt"
	"time"
)

// Results. A completed op's result is kept, sealed to the agent that
// asked (ADR 0018), in AIRLOCK_RESULTS on ResultSubject, for the
// retention the policy gave the op; the agent gets it on any retry of the
// request and by a ResultQuery on its own ResultQuerySubject.
const (
	// ResultSubjects are the subjects of AIRLOCK_RESULTS.
	ResultSubjects = SubjectRoot + ".result.>"
	// ResultQuerySubjects matches every principal's ResultQuerySubject.
	ResultQuerySubjects = SubjectRoot + ".fetch.*"

	// DefaultResultTTL is how long a result is kept when neither the
	// policy nor serve's --result-ttl says otherwise.
	DefaultResultTTL = 24 * time.Hour
	// MaxResultTTL bounds a result's retention.
	MaxResultTTL = 30 * 24 * time.Hour
	// DefaultRetainedBytes bounds the result bytes (their compacted size, as
	// result_bytes) one workspace keeps;
	// over it the oldest results are erased first.
	DefaultRetainedBytes = 1 << 30
)

// ResultSubject is where AIRLOCK_RESULTS keeps the sealed results of
// workspace ws: airlock.v1.result.<ws>, one subject for all of them, each
// result a message that the completed event counting it names by its
// stream sequence (result_seq) and that carries its op and attempt in
// HeaderResultOp and HeaderResultAttempt. One subject per result would
// cost the server an entry in its subject index per kept result for the
// result's retention (ADR 0027).
func ResultSubject(ws string) string { return SubjectRoot + ".result." + ws }

// Headers of a kept result's message: the op and the attempt it is the
// result of, which a read by sequence checks.
const (
	HeaderResultOp      = "Airlock-Op-Id"
	HeaderResultAttempt = "Airlock-Attempt"
)

// AttemptResultSubject is where versions before result_seq kept the
// sealed result of one attempt of op: airlock.v1.result.<ws>.<op>.<attempt>.
// Results so kept are read and erased there (a completed event without
// result_seq) until their TTL removes the last of them.
func AttemptResultSubject(ws, op, attempt string) string {
	return SubjectRoot + ".result." + ws + "." + op + "." + attempt
}

// AttemptResultFilter matches every result of op kept on its attempts'
// subjects (AttemptResultSubject).
func AttemptResultFilter(ws, op string) string {
	return SubjectRoot + ".result." + ws + "." + op + ".*"
}

// ResultQuerySubject is where principal asks for results:
// airlock.v1.fetch.<principal>. With credentials on, the server lets a
// principal publish only under its own name, so the name is who asks.
func ResultQuerySubject(principal string) string { return SubjectRoot + ".fetch." + principal }

// Retention is what the policy keeps of an op's result.
type Retention struct {
	// TTLSeconds is how long the result is kept after the op completes;
	// 0 keeps nothing.
	TTLSeconds int64 `json:"ttl_s"`
	// EraseOnDelivery erases it once the agent confirms it has it.
	EraseOnDelivery bool `json:"erase_on_delivery,omitempty"`
}

// TTL is the retention's time-to-live.
func (r Retention) TTL() time.Duration { return time.Duration(r.TTLSeconds) * time.Second }

// ValidTTL checks a result time-to-live: 0 (keep nothing) or 1 s to
// MaxResultTTL, in whole seconds.
func ValidTTL(d time.Duration) error {
	if d == 0 {
		return nil
	}
	if d < time.Second || d > MaxResultTTL || d%time.Second != 0 {
		return fmt.Errorf("result ttl %s: want 0 (keep none) or whole seconds from 1s to %s", d, MaxResultTTL)
	}
	return nil
}

// ResultQuery asks for a completed op's result. The answer (to the NATS
// request's inbox, which every client principal may subscribe to) says
// whether the result is there; with ReplyTo, one of the requesting
// agent's reply subjects (ValidReplyTo), the result itself is published
// there, which only that agent may subscribe to. Delivered, from the
// agent that asked for the op, confirms that it has the result (it opened
// it and checked it against the digest): a result kept with erase on
// delivery is erased then.
type ResultQuery struct {
	OpID      string `json:"op_id"`
	ReplyTo   string `json:"reply_to,omitempty"`
	Delivered bool   `json:"delivered,omitempty"`
}

// ResultAnswer answers a ResultQuery. Sealed is the result sealed to the
// requesting agent; Result is the result itself when Airlock holds the
// key it is sealed to (--no-auth). Either is checked against ResultDigest,
// the digest the op's completed event recorded, before use.
type ResultAnswer struct {
	OpID            string          `json:"op_id"`
	Workspace       string          `json:"workspace"`
	State           State           `json:"state"`
	ResultDigest    string          `json:"result_digest"`
	ResultBytes     int             `json:"result_bytes"`
	Result          json.RawMessage `json:"result,omitempty"`
	Sealed          []byte          `json:"sealed_result,omitempty"`
	KeptUntil       *time.Time      `json:"result_kept_until,omitempty"`
	EraseOnDelivery bool            `json:"result_erase_on_delivery,omitempty"`
	// Erased is set in the answer to Delivered once the result is gone.
	Erased bool `json:"erased,omitempty"`
	// SentTo is the ReplyTo the result was published to: the answer to
	// the request itself never carries Result or Sealed.
	SentTo string `json:"sent_to,omitempty"`
}

// KeptResult is one result to keep for the agent that asked: what the
// runner hands its result keeper (consumers/executor.ResultKeeper) before
// the completed event.
type KeptResult struct {
	Workspace, OpID, Attempt, Agent string
	// Result is the compacted result the completed event's digest covers.
	Result    []byte
	Retention Retention
}

// StoredResult is where and until when a kept result is stored.
type StoredResult struct {
	// Until is when the result is erased; nil when it was not kept (a
	// retention of zero, or an agent with no key).
	Until *time.Time
	// Seq is the result's sequence in AIRLOCK_RESULTS, which the
	// completed event names (result_seq); 0 when it was not kept.
	Seq uint64
}
