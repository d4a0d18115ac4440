package watch

import (
	"fmt"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/events"
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
// or of every workspace when ws is "". For one workspace: its op events,
// rejections and mode controls, and the policy loads, which hold for
// every workspace. The caller owns the slice.
func Subjects(ws string) []string {
	if ws == "" {
		return []string{events.OpSubjects, events.RejectedSubjects, events.SysSubjects}
	}
	return []string{events.SubjectRoot + ".op." + ws + ".>", events.RejectedSubject(ws), events.ModeSubject(ws), events.PolicySubject}
}

// Event is one event as watch shows it: where and what, and the details
// its type carries. Pointer and empty fields are those the type does not
// carry. It marshals to the JSON form, with the time as TimeLayout.
type Event struct {
	// Time is the event's own time (its ce-time, set when it was
	// appended), or when it arrived for an undecodable message.
	Time time.Time `json:"-"`
	// Type is the CloudEvents type; empty when undecodable.
	Type events.Type `json:"type,omitempty"`
	// Kind is what happened: the op event's verb (decided, held, granted,
	// denied, expired, claimed, completed, failed, ambiguous, scrubbed),
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
// event, a rejection. Undecodable messages count too, as something to
// look at.
func (e Event) Terminal() bool {
	return e.State.Terminal() || e.Kind == Rejected || e.Kind == Undecodable
}

// Decode makes the Event of a message received on subject with header h
// and body. received stands for the time of a message without one. A
// message that is not an event, or not the event its subject names, is an
// Undecodable Event with the reason; Decode never fails.
func Decode(subject string, h nats.Header, body []byte, received time.Time) Event {
	e := Event{Subject: subject, Time: received.UTC()}
	// What the subject claims, shown even when the message is undecodable,
	// as far as it names valid names: a subject is anybody's bytes.
	if ws, op, tool, _, ok := events.OpSubjectParts(subject); ok && events.ValidName(ws) && events.ValidOpID(op) && events.ValidName(tool) {
		e.Workspace, e.OpID, e.Tool = ws, op, tool
	} else if ws, ok := strings.CutPrefix(subject, events.SubjectRoot+".rejected."); ok && (events.ValidName(ws) || ws == events.NoWorkspace) {
		e.Workspace = ws
	} else if ws, ok := strings.CutPrefix(subject, events.SubjectRoot+".sys.mode."); ok && events.ValidName(ws) {
		e.Workspace = ws
	}
	undecodable := func(format string, args ...any) Event {
		e.Kind, e.Error = Undecodable, fmt.Sprintf(format, args...)
		return e
	}
	// A live event arrives as it was appended. A direct get's answer,
	// sent to an event subject as its reply, is a stored copy and says so.
	if s := h.Get(jetstream.StreamHeader); s != "" {
		return undecodable("a copy of a message stored in %s, not a live event", s)
	}
	typ, _, data, err := events.DecodeStored(h, body)
	if err != nil {
		return undecodable("%v", err)
	}
	e.Type = typ
	if raw := h.Get(events.HeaderPrefix + "time"); raw != "" {
		if t, err := time.Parse(time.RFC3339Nano, raw); err == nil {
			e.Time = t.UTC()
		}
	}
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
	case *events.Completed:
		e.Attempt, e.Recovered, e.ResultDigest = d.Attempt, d.Recovered, d.ResultDigest
		e.DurationMS, e.ResultBytes = &d.DurationMS, &d.ResultBytes
	case *events.Failed:
		e.Attempt, e.Code, e.Message = d.Attempt, d.Code, d.Message
	case *events.Ambiguous:
		e.Attempt, e.Code, e.Message = d.Attempt, d.Code, d.Known
	case *events.Scrubbed:
		e.RequestSeq = d.RequestSeq
	}
}
