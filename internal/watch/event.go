package watch

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Kinds of Event that are not an op event's verb.
const (
	// Rejected is a request.rejected record: a bad request.
	Rejected = "rejected"
	// ModeSet is an operator's mode control of a workspace.
	ModeSet = "mode.set"
	// PolicyLoaded is a policy a gate started with or reloaded.
	PolicyLoaded = "policy.loaded"
	// Undecodable is a message that is not a valid event for its subject.
	Undecodable = "undecodable"
)

// TimeLayout is how an Event's time is written: RFC 3339 in UTC with
// milliseconds.
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// Subjects are the subscriptions that receive every event of workspace ws,
// or of every workspace when ws is "", as AIRLOCK_OPS republishes them
// once stored (events.LivePrefix). For one workspace: its op events,
// rejections and mode controls, and the policy loads, which hold for
// every workspace. The caller owns the slice.
func Subjects(ws string) []string {
	if ws == "" {
		return []string{events.LiveSubjects}
	}
	return []string{
		events.LiveSubject(events.SubjectRoot + ".op." + ws + ".>"), events.LiveSubject(events.RejectedSubject(ws)),
		events.LiveSubject(events.ModeSubject(ws)), events.LiveSubject(events.PolicySubject),
	}
}

// Republished reads the headers the server puts on a message AIRLOCK_OPS
// republishes once stored: its stream sequence, the subject it was stored
// on, and when. ok is false for anything else that reaches a live
// subject: an answer a client aimed there by naming it as its reply (no
// stream headers, or a direct get's copy, which lacks Nats-Last-Sequence
// or, in a batch, carries Nats-Num-Pending).
func Republished(h nats.Header) (seq uint64, subject string, stored time.Time, ok bool) {
	if h.Get(jetstream.StreamHeader) != streams.Ops || h.Get(lastSequenceHeader) == "" || h.Get(numPendingHeader) != "" {
		return 0, "", time.Time{}, false
	}
	// Each once: the server adds its headers after those a message was
	// stored with, so a request stored with forged ones (which an agent
	// may publish) and fetched by direct get to a live subject carries
	// two of each.
	for _, k := range []string{jetstream.StreamHeader, jetstream.SubjectHeader, jetstream.SequenceHeader, jetstream.TimeStampHeaer, lastSequenceHeader} {
		if len(h.Values(k)) != 1 {
			return 0, "", time.Time{}, false
		}
	}
	seq, err := strconv.ParseUint(h.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil || seq == 0 {
		return 0, "", time.Time{}, false
	}
	stored, err = time.Parse(time.RFC3339Nano, h.Get(jetstream.TimeStampHeaer))
	if err != nil {
		return 0, "", time.Time{}, false
	}
	subject = h.Get(jetstream.SubjectHeader)
	return seq, subject, stored.UTC(), subject != ""
}

// Headers of republished messages and direct gets that jetstream does not
// name.
const (
	lastSequenceHeader = "Nats-Last-Sequence"
	numPendingHeader   = "Nats-Num-Pending"
)

// Event is one event as watch shows it: where and what, and the details
// its type carries. Pointer and empty fields are those the type does not
// carry. It marshals to the JSON form, with the time as TimeLayout.
type Event struct {
	// Time is when AIRLOCK_OPS stored the event, or when it arrived for a
	// message that is not a stored one.
	Time time.Time `json:"-"`
	// Seq is the event's AIRLOCK_OPS sequence; 0 for a message that is
	// not a stored one.
	Seq uint64 `json:"seq,omitempty"`
	// Type is the CloudEvents type; empty when undecodable.
	Type events.Type `json:"type,omitempty"`
	// Kind is what happened: the op event's verb (decided, held, granted,
	// denied, expired, claimed, started, completed, failed, ambiguous,
	// scrubbed),
	// Rejected, ModeSet, PolicyLoaded or Undecodable.
	Kind      string `json:"event"`
	Subject   string `json:"subject"`
	Workspace string `json:"workspace,omitempty"`
	OpID      string `json:"op_id,omitempty"`
	Tool      string `json:"tool,omitempty"`
	// State is the op's state after the event; empty for scrubbed, which
	// leaves it as it was, and for what is not an op event.
	State events.State `json:"state,omitempty"`
	Code  events.Code  `json:"code,omitempty"`

	Agent    string `json:"agent,omitempty"`
	HoldID   string `json:"hold_id,omitempty"`
	Approver string `json:"approver,omitempty"`
	// Actor is the operator of a mode control.
	Actor string `json:"actor,omitempty"`
	Mode  string `json:"mode,omitempty"`
	Rule  string `json:"rule,omitempty"`
	// Attempt is a claim's or an outcome's attempt; Recovers the lost
	// attempt a claim takes over.
	Attempt      string     `json:"attempt,omitempty"`
	Recovers     string     `json:"recovers,omitempty"`
	DurationMS   *int64     `json:"duration_ms,omitempty"`
	ResultBytes  *int       `json:"result_bytes,omitempty"`
	ResultDigest string     `json:"result_digest,omitempty"`
	Recovered    bool       `json:"recovered,omitempty"`
	ExpiresAt    *time.Time `json:"expires_at,omitempty"`
	// RequestSubject, RequestSeq and Size locate a rejected request.
	RequestSubject string `json:"request_subject,omitempty"`
	RequestSeq     uint64 `json:"request_seq,omitempty"`
	Size           *int   `json:"size,omitempty"`
	// Hash, PreviousHash, Source and Warnings describe a loaded policy.
	Hash         string `json:"hash,omitempty"`
	PreviousHash string `json:"previous_hash,omitempty"`
	Source       string `json:"source,omitempty"`
	Warnings     int    `json:"warnings,omitempty"`
	// Reason is a decision's or a resolution's; Message a failure's,
	// an ambiguity's (what is known) or a rejection's.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Error says why a message is Undecodable.
	Error string `json:"error,omitempty"`
}

// MarshalJSON writes e with "time" first; times are in TimeLayout.
func (e Event) MarshalJSON() ([]byte, error) {
	type plain Event
	aux := struct {
		Time string `json:"time"`
		plain
		ExpiresAt string `json:"expires_at,omitempty"`
	}{Time: e.Time.UTC().Format(TimeLayout), plain: plain(e)}
	if e.ExpiresAt != nil {
		aux.ExpiresAt = e.ExpiresAt.UTC().Format(TimeLayout)
	}
	return events.MarshalJSON(aux)
}

// Terminal reports whether e ends its op or its request: a terminal op
// event, a rejection. Undecodable messages do not: anyone who may send a
// request can aim its answer at a live subject, and such noise must not
// push real outcomes out of view.
func (e Event) Terminal() bool {
	return e.State.Terminal() || e.Kind == Rejected
}

// Decode makes the Event of a message received on live subject with
// header h and body. received stands for the time of a message that is
// not a stored one. A message that is not an event AIRLOCK_OPS stored, or
// not the event its subject names, is an Undecodable Event with the
// reason; Decode never fails.
func Decode(live string, h nats.Header, body []byte, received time.Time) Event {
	e := Event{Subject: live, Time: received.UTC()}
	undecodable := func(format string, args ...any) Event {
		e.Kind, e.Error = Undecodable, fmt.Sprintf(format, args...)
		return e
	}
	seq, subject, stored, ok := Republished(h)
	if !ok {
		return undecodable("not a message AIRLOCK_OPS stored (an answer aimed at %s?)", live)
	}
	if events.LiveSubject(subject) != live {
		return undecodable("stored on %s but republished on %s", subject, live)
	}
	e.Subject, e.Seq, e.Time = subject, seq, stored
	// What the subject claims, shown even when the message is undecodable,
	// as far as it names valid names: a subject is anybody's bytes.
	if ws, op, tool, _, ok := events.OpSubjectParts(subject); ok && events.ValidName(ws) && events.ValidOpID(op) && events.ValidName(tool) {
		e.Workspace, e.OpID, e.Tool = ws, op, tool
	} else if ws, ok := strings.CutPrefix(subject, events.SubjectRoot+".rejected."); ok && (events.ValidName(ws) || ws == events.NoWorkspace) {
		e.Workspace = ws
	} else if ws, ok := strings.CutPrefix(subject, events.SubjectRoot+".sys.mode."); ok && events.ValidName(ws) {
		e.Workspace = ws
	}
	typ, _, data, err := events.DecodeStored(h, body)
	if err != nil {
		return undecodable("%v", err)
	}
	e.Type = typ
	if hdr, ok := events.IsOpEvent(data); ok {
		_, _, _, verb, _ := events.OpSubjectParts(subject)
		if e.OpID == "" || e.Workspace != hdr.Workspace || e.OpID != hdr.OpID || verb != typ.Short() {
			e.Type = ""
			return undecodable("a %s event of op %s in %s on another subject", typ.Short(), hdr.OpID, hdr.Workspace)
		}
		e.Kind, e.State = verb, stateAfter(typ)
		opDetails(&e, data)
		return e
	}
	switch d := data.(type) {
	case *events.Rejected:
		if e.Workspace == "" || subject != events.RejectedSubject(e.Workspace) {
			break
		}
		e.Kind, e.Code, e.Message = Rejected, d.Code, d.Message
		e.RequestSubject, e.RequestSeq, e.Size = d.Subject, d.RequestSeq, &d.Size
		return e
	case *events.ModeSet:
		if e.Workspace == "" || subject != events.ModeSubject(d.Workspace) {
			break
		}
		e.Kind, e.Mode, e.Actor, e.Reason, e.ExpiresAt = ModeSet, d.Mode, d.Actor, d.Reason, d.ExpiresAt
		if e.Mode == "" {
			e.Mode = "cleared"
		}
		return e
	case *events.PolicyLoaded:
		if subject != events.PolicySubject {
			break
		}
		e.Kind, e.Hash, e.PreviousHash, e.Source, e.Warnings = PolicyLoaded, d.Hash, d.PreviousHash, d.Source, len(d.Warnings)
		return e
	}
	e.Type = ""
	return undecodable("a %s event on %s", typ.Short(), subject)
}

// stateAfter is the op's state after an event of type t; "" for scrubbed.
func stateAfter(t events.Type) events.State {
	switch t {
	case events.TypeCompleted:
		return events.StateCompleted
	case events.TypeFailed:
		return events.StateFailed
	case events.TypeDenied:
		return events.StateDenied
	case events.TypeExpired:
		return events.StateExpired
	case events.TypeAmbiguous:
		return events.StateAmbiguous
	}
	return events.StateAfter(t)
}

// opDetails copies what an op event's data says into e.
func opDetails(e *Event, data any) {
	agent := func(s *events.Summary) {
		if s != nil {
			e.Agent = s.Agent
		}
	}
	switch d := data.(type) {
	case *events.Decided:
		agent(d.Request)
		e.Reason, e.Rule, e.Mode = d.Reason, d.Rule, d.Mode
	case *events.Held:
		agent(d.Request)
		exp := d.ExpiresAt
		e.HoldID, e.ExpiresAt, e.Reason, e.Rule, e.Mode = d.HoldID, &exp, d.Reason, d.Rule, d.Mode
	case *events.Granted:
		e.HoldID, e.Approver, e.Reason = d.HoldID, d.Approver, d.Reason
	case *events.Denied:
		agent(d.Request)
		e.Code, e.Reason, e.Rule, e.Mode = d.Code, d.Reason, d.Rule, d.Mode
		e.Approver, e.HoldID = d.Actor, d.HoldID
	case *events.Expired:
		e.Code, e.HoldID = events.CodeHoldExpired, d.HoldID
	case *events.Claimed:
		e.Attempt, e.Recovers = d.Attempt, d.Recovers
	case *events.Started:
		e.Attempt = d.Attempt
		if d.Claim != nil {
			e.Recovers = d.Claim.Recovers
		}
		if d.Decision != nil {
			agent(d.Decision.Request)
			e.Reason, e.Rule, e.Mode = d.Decision.Reason, d.Decision.Rule, d.Decision.Mode
		}
	case *events.Completed:
		e.Attempt, e.Recovered, e.ResultDigest = d.Attempt, d.Recovered, d.ResultDigest
		e.DurationMS, e.ResultBytes = &d.DurationMS, &d.ResultBytes
	case *events.Failed:
		e.Attempt, e.Code, e.Message = d.Attempt, d.Code, d.Message
	case *events.Ambiguous:
		e.Attempt, e.Code, e.Message = d.Attempt, d.Code, d.Known
	case *events.Scrubbed:
		e.RequestSeq = d.RequestSeq
	case *events.ResultErased:
		e.Reason, e.ResultDigest, e.ResultBytes = d.Reason, d.ResultDigest, &d.ResultBytes
	}
}
