package events_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/events"
)

var (
	stateHdr = events.OpHeader{OpID: testOpID, Workspace: "acme"}
	t0       = time.Date(2025, 5, 6, 7, 8, 9, 0, time.UTC)
)

func testSummary() *events.Summary {
	return &events.Summary{
		Fingerprint:    "6f1c2b0e9a7d4c3b8e5f1a2d3c4b5a69e0d1c2b3a4958677f8e9d0c1b2a39485",
		Agent:          "support-bot",
		Tool:           "send_email",
		Class:          "network",
		ArgsDigest:     "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
		IdempotencyKey: "ticket-4711",
		RequestSeq:     41,
	}
}

// The events the tests apply, by name. "a1" is the attempt of the first
// claim in every history below.
func stateEvents() map[string]any {
	return map[string]any{
		"decided+summary":     &events.Decided{OpHeader: stateHdr, Request: testSummary(), PolicyHash: "sha256:p1", Reason: "tool allowed"},
		"decided":             &events.Decided{OpHeader: stateHdr, PolicyHash: "sha256:p1", Reason: "granted by alice"},
		"held+summary":        &events.Held{OpHeader: stateHdr, Request: testSummary(), HoldID: "hold_1", ArgsDigest: testSummary().ArgsDigest, ExpiresAt: t0.Add(time.Hour), PolicyHash: "sha256:p1", Reason: "needs approval"},
		"held":                &events.Held{OpHeader: stateHdr, HoldID: "hold_2", PolicyHash: "sha256:p1", Reason: "again"},
		"denied+summary":      &events.Denied{OpHeader: stateHdr, Request: testSummary(), Code: events.CodeCapabilityDenied, Reason: "destructive tool", PolicyHash: "sha256:p1"},
		"denied":              &events.Denied{OpHeader: stateHdr, Code: events.CodeCapabilityDenied, Reason: "denied by bob", Actor: "bob"},
		"granted":             &events.Granted{OpHeader: stateHdr, HoldID: "hold_1", ArgsDigest: testSummary().ArgsDigest, Approver: "alice", Reason: "looks fine"},
		"expired":             &events.Expired{OpHeader: stateHdr, HoldID: "hold_1"},
		"claimed a1":          &events.Claimed{OpHeader: stateHdr, Attempt: "a1", Claim: events.Claim{Executor: "send_email", WorkSeq: 50, Delivery: 1}},
		"claimed a2 recov a1": &events.Claimed{OpHeader: stateHdr, Attempt: "a2", Claim: events.Claim{Executor: "send_email", Recovers: "a1", WorkSeq: 50, Delivery: 2}},
		"claimed a2 recov zz": &events.Claimed{OpHeader: stateHdr, Attempt: "a2", Claim: events.Claim{Executor: "send_email", Recovers: "zz", WorkSeq: 50, Delivery: 2}},
		"claimed a2":          &events.Claimed{OpHeader: stateHdr, Attempt: "a2", Claim: events.Claim{Executor: "send_email", WorkSeq: 51, Delivery: 1}},
		// Started events that claim the op (ADR 0023).
		"claiming a1":          &events.Started{OpHeader: stateHdr, Attempt: "a1", Claim: &events.Claim{Executor: "send_email", WorkSeq: 50, Delivery: 1, Instance: "i1", Host: "h1"}},
		"claiming a2 recov a1": &events.Started{OpHeader: stateHdr, Attempt: "a2", Claim: &events.Claim{Executor: "send_email", Recovers: "a1", WorkSeq: 50, Delivery: 2}},
		"claiming a2 recov zz": &events.Started{OpHeader: stateHdr, Attempt: "a2", Claim: &events.Claim{Executor: "send_email", Recovers: "zz", WorkSeq: 50, Delivery: 2}},
		// A started event that is the op's first event, carrying the
		// decision (ADR 0025).
		"starting a1": &events.Started{OpHeader: stateHdr, Attempt: "a1",
			Decision: &events.Decided{OpHeader: stateHdr, Request: testSummary(), PolicyHash: "sha256:p1", Reason: "tool allowed"},
			Claim:    &events.Claim{Executor: "send_email", WorkSeq: 41, Delivery: 1, Consumer: "airlock-gate", Instance: "i1", Host: "h1"}},
		// The same without the request's summary in its decision.
		"starting a1 bare": &events.Started{OpHeader: stateHdr, Attempt: "a1",
			Decision: &events.Decided{OpHeader: stateHdr, PolicyHash: "sha256:p1", Reason: "granted by alice"},
			Claim:    &events.Claim{Executor: "send_email", WorkSeq: 43, Delivery: 1, Consumer: "airlock-resume"}},
		"started a1":          &events.Started{OpHeader: stateHdr, Attempt: "a1"},
		"started zz":          &events.Started{OpHeader: stateHdr, Attempt: "zz"},
		"completed a1":        &events.Completed{OpHeader: stateHdr, Attempt: "a1", ResultDigest: "sha256:r1", ResultBytes: 13, DurationMS: 12},
		"completed zz":        &events.Completed{OpHeader: stateHdr, Attempt: "zz", ResultDigest: "sha256:r2", ResultBytes: 2},
		"completed":           &events.Completed{OpHeader: stateHdr, ResultDigest: "sha256:r2", ResultBytes: 2},
		"failed":              &events.Failed{OpHeader: stateHdr, Code: events.CodeRequestUnavailable, Message: "args gone"},
		"failed a1":           &events.Failed{OpHeader: stateHdr, Attempt: "a1", Code: events.CodeExecutorFailed, Message: "smtp 550"},
		"failed zz":           &events.Failed{OpHeader: stateHdr, Attempt: "zz", Code: events.CodeExecutorFailed, Message: "late"},
		"ambiguous a1":        &events.Ambiguous{OpHeader: stateHdr, Attempt: "a1", Code: events.CodeAmbiguous, Known: "request sent, no reply"},
		"ambiguous zz":        &events.Ambiguous{OpHeader: stateHdr, Attempt: "zz", Code: events.CodeAmbiguous, Known: "?"},
		"scrubbed":            &events.Scrubbed{OpHeader: stateHdr, RequestSeq: 41},
		"completed a1 kept":   &events.Completed{OpHeader: stateHdr, Attempt: "a1", ResultDigest: "sha256:r1", ResultBytes: 13, KeptUntil: &keptUntil},
		"result_erased":       &events.ResultErased{OpHeader: stateHdr, Reason: events.ErasedExpired, ResultDigest: "sha256:r1", ResultBytes: 13},
		"result_erased blank": &events.ResultErased{OpHeader: stateHdr, ResultDigest: "sha256:r1", ResultBytes: 13},
	}
}

var keptUntil = t0.Add(24 * time.Hour)

// Histories that bring an op to each state, by name.
var stateHistories = map[string][]string{
	"new":                 {},
	"ready":               {"decided+summary"},
	"held":                {"held+summary"},
	"granted":             {"held+summary", "granted"},
	"ready after grant":   {"held+summary", "granted", "decided+summary"},
	"executing":           {"decided+summary", "claimed a1"},
	"started":             {"decided+summary", "claimed a1", "started a1"},
	"claimed by started":  {"decided+summary", "claiming a1"},
	"started by gate":     {"starting a1"},
	"started after grant": {"held+summary", "granted", "starting a1"},
	"completed started":   {"decided+summary", "claimed a1", "started a1", "completed a1"},
	"completed":           {"decided+summary", "claimed a1", "completed a1"},
	"failed":              {"decided+summary", "failed"},
	"failed executing":    {"decided+summary", "claimed a1", "failed a1"},
	"denied":              {"denied+summary"},
	"denied after hold":   {"held+summary", "denied"},
	"expired":             {"held+summary", "expired"},
	"ambiguous":           {"decided+summary", "claimed a1", "ambiguous a1"},
	"completed scrubbed":  {"decided+summary", "claimed a1", "completed a1", "scrubbed"},
	"completed kept":      {"decided+summary", "claimed a1", "completed a1 kept"},
	"kept erased":         {"decided+summary", "claimed a1", "completed a1 kept", "result_erased"},
	"denied scrubbed":     {"denied+summary", "scrubbed"},
}

// allowed is the transition table as the state machine documents it:
// history name -> event name -> state after. Every pair not listed must be
// refused.
var allowed = map[string]map[string]events.State{
	"new": {
		"decided+summary": events.StateReady,
		"held+summary":    events.StateHeld,
		"denied+summary":  events.StateDenied,
		"starting a1":     events.StateExecuting,
	},
	"ready": {
		"claimed a1":           events.StateExecuting,
		"claimed a2":           events.StateExecuting,
		"claimed a2 recov a1":  events.StateExecuting,
		"claimed a2 recov zz":  events.StateExecuting,
		"claiming a1":          events.StateExecuting,
		"claiming a2 recov a1": events.StateExecuting,
		"claiming a2 recov zz": events.StateExecuting,
		"failed":               events.StateFailed,
		"failed a1":            events.StateFailed,
		"failed zz":            events.StateFailed,
	},
	"held": {
		"granted":        events.StateGranted,
		"denied":         events.StateDenied,
		"denied+summary": events.StateDenied,
		"expired":        events.StateExpired,
	},
	"granted": {
		"decided+summary": events.StateReady,
		"denied":          events.StateDenied,
		"denied+summary":  events.StateDenied,
		// Resumed and started at once by a gate's process (ADR 0029).
		"starting a1": events.StateExecuting,
	},
	"executing": {
		"claimed a2 recov a1":  events.StateExecuting,
		"claiming a2 recov a1": events.StateExecuting,
		"started a1":           events.StateExecuting,
		"completed a1":         events.StateCompleted,
		"completed a1 kept":    events.StateCompleted,
		"failed a1":            events.StateFailed,
		"ambiguous a1":         events.StateAmbiguous,
	},
	"started": {
		"claimed a2 recov a1":  events.StateExecuting,
		"claiming a2 recov a1": events.StateExecuting,
		"completed a1":         events.StateCompleted,
		"completed a1 kept":    events.StateCompleted,
		"failed a1":            events.StateFailed,
		"ambiguous a1":         events.StateAmbiguous,
	},
	"claimed by started": {
		"claimed a2 recov a1":  events.StateExecuting,
		"claiming a2 recov a1": events.StateExecuting,
		"completed a1":         events.StateCompleted,
		"completed a1 kept":    events.StateCompleted,
		"failed a1":            events.StateFailed,
		"ambiguous a1":         events.StateAmbiguous,
	},
	"completed started":  {"scrubbed": events.StateCompleted},
	"completed":          {"scrubbed": events.StateCompleted},
	"failed":             {"scrubbed": events.StateFailed},
	"failed executing":   {"scrubbed": events.StateFailed},
	"denied":             {"scrubbed": events.StateDenied},
	"denied after hold":  {"scrubbed": events.StateDenied},
	"expired":            {"scrubbed": events.StateExpired},
	"ambiguous":          {"scrubbed": events.StateAmbiguous},
	"completed scrubbed": {},
	"denied scrubbed":    {},
	// A kept result is erased once; an op whose result was never kept,
	// or that did not complete, has nothing to erase.
	"completed kept": {"scrubbed": events.StateCompleted, "result_erased": events.StateCompleted},
	"kept erased":    {"scrubbed": events.StateCompleted},
}

func init() {
	allowed["ready after grant"] = allowed["ready"]
	// An op its gate's process started goes on as one claimed by a
	// started event does.
	allowed["started by gate"] = allowed["claimed by started"]
	allowed["started after grant"] = allowed["claimed by started"]
}

// opAfter applies the named history to a fresh op, one second apart with
// stream sequences 10, 11, ...
func opAfter(t *testing.T, history string) *events.Op {
	t.Helper()
	names, ok := stateHistories[history]
	require.True(t, ok, history)
	evs := stateEvents()
	op := &events.Op{}
	for i, name := range names {
		require.NoError(t, op.Apply(evs[name], uint64(10+i), t0.Add(time.Duration(i)*time.Second)), "history %s, event %s", history, name)
	}
	return op
}

func TestApplyTransitionTable(t *testing.T) {
	require.Len(t, allowed, len(stateHistories))
	for history := range stateHistories {
		for evName := range stateEvents() {
			t.Run(history+"/"+evName, func(t *testing.T) {
				op := opAfter(t, history)
				before := *op
				seq := uint64(100)
				at := t0.Add(time.Hour)
				err := op.Apply(stateEvents()[evName], seq, at)
				want, ok := allowed[history][evName]
				if !ok {
					require.Error(t, err)
					assert.Equal(t, events.CodeInvalidEvent, events.CodeOf(err), "error: %v", err)
					assert.ErrorIs(t, err, &events.Error{Code: events.CodeInvalidEvent})
					assert.Equal(t, before, *op, "a refused event leaves the op unchanged")
					return
				}
				require.NoError(t, err)
				assert.Equal(t, want, op.State)
				assert.Equal(t, seq, op.Version)
				assert.Equal(t, at, op.UpdatedAt)
				assert.Equal(t, testOpID, op.ID)
				assert.Equal(t, "acme", op.Workspace)
				if history == "new" {
					assert.Equal(t, seq, op.FirstSeq)
					assert.Equal(t, at, op.CreatedAt)
				} else {
					assert.Equal(t, before.FirstSeq, op.FirstSeq)
					assert.Equal(t, before.CreatedAt, op.CreatedAt)
				}
			})
		}
	}
}

func TestApplyForbidden(t *testing.T) {
	evs := stateEvents()
	otherOp := &events.Decided{OpHeader: events.OpHeader{OpID: "op_00000000000000000000000000000000", Workspace: "acme"}, Request: testSummary(), PolicyHash: "p"}
	tests := []struct {
		name    string
		history string
		ev      any
		msg     string
	}{
		{name: "decided without summary first", history: "new", ev: evs["decided"], msg: "decided cannot start an op"},
		{name: "held without summary first", history: "new", ev: evs["held"], msg: "held cannot start an op"},
		{name: "denied without summary first", history: "new", ev: evs["denied"], msg: "denied cannot start an op"},
		{name: "claimed first", history: "new", ev: evs["claimed a1"], msg: "claimed cannot start an op"},
		{name: "scrubbed first", history: "new", ev: evs["scrubbed"], msg: "scrubbed cannot start an op"},
		{name: "granted from ready", history: "ready", ev: evs["granted"], msg: "granted not allowed in state ready"},
		{name: "decided twice", history: "ready", ev: evs["decided+summary"], msg: "decided not allowed in state ready"},
		{name: "completed from ready", history: "ready", ev: evs["completed a1"], msg: "completed not allowed in state ready"},
		{name: "completed wrong attempt", history: "executing", ev: evs["completed zz"], msg: "completed not allowed in state executing"},
		{name: "completed no attempt", history: "executing", ev: evs["completed"], msg: "completed not allowed in state executing"},
		{name: "failed wrong attempt", history: "executing", ev: evs["failed zz"], msg: "failed not allowed in state executing"},
		{name: "failed no attempt while executing", history: "executing", ev: evs["failed"], msg: "failed not allowed in state executing"},
		{name: "ambiguous wrong attempt", history: "executing", ev: evs["ambiguous zz"], msg: "ambiguous not allowed in state executing"},
		{name: "second claim without recovery", history: "executing", ev: evs["claimed a2"], msg: "claimed not allowed in state executing"},
		{name: "recovery of another attempt", history: "executing", ev: evs["claimed a2 recov zz"], msg: "claimed not allowed in state executing"},
		{name: "started twice", history: "started", ev: evs["started a1"], msg: "started not allowed in state executing"},
		{name: "started by another attempt", history: "executing", ev: evs["started zz"], msg: "started not allowed in state executing"},
		{name: "started before a claim", history: "ready", ev: evs["started a1"], msg: "started not allowed in state ready"},
		{name: "started first", history: "new", ev: evs["started a1"], msg: "started cannot start an op"},
		{name: "claiming started first", history: "new", ev: evs["claiming a1"], msg: "started cannot start an op"},
		{name: "claiming started twice", history: "claimed by started", ev: evs["claiming a1"], msg: "started not allowed in state executing"},
		{name: "started again after it claimed", history: "claimed by started", ev: evs["started a1"], msg: "started not allowed in state executing"},
		{name: "claiming recovery of another attempt", history: "claimed by started", ev: evs["claiming a2 recov zz"], msg: "started not allowed in state executing"},
		{name: "started with a decision after decided", history: "ready", ev: evs["starting a1"], msg: "started with a decision not allowed in state ready"},
		{name: "started with a decision twice", history: "started by gate", ev: evs["starting a1"], msg: "started with a decision not allowed in state executing"},
		{name: "started with a decision after a grant, no summary", history: "granted", ev: evs["starting a1 bare"], msg: "started with a decision not allowed in state granted"},
		{name: "started with a decision after a held", history: "held", ev: evs["starting a1"], msg: "started with a decision not allowed in state held"},
		{name: "started with a decision but no claim", history: "new", ev: &events.Started{OpHeader: stateHdr, Attempt: "a1",
			Decision: &events.Decided{OpHeader: stateHdr, Request: testSummary()}}, msg: "started with a decision cannot start an op"},
		{name: "started with a decision that recovers", history: "new", ev: &events.Started{OpHeader: stateHdr, Attempt: "a2",
			Decision: &events.Decided{OpHeader: stateHdr, Request: testSummary()}, Claim: &events.Claim{Executor: "send_email", Recovers: "a1"}}, msg: "started with a decision cannot start an op"},
		{name: "started with a decision of another op", history: "new", ev: &events.Started{OpHeader: stateHdr, Attempt: "a1",
			Decision: &events.Decided{OpHeader: events.OpHeader{OpID: "op_00000000000000000000000000000000", Workspace: "acme"}, Request: testSummary()},
			Claim:    &events.Claim{Executor: "send_email"}}, msg: "started with a decision cannot start an op"},
		{name: "started with a decision without attempt", history: "new", ev: &events.Started{OpHeader: stateHdr,
			Decision: &events.Decided{OpHeader: stateHdr, Request: testSummary()}, Claim: &events.Claim{Executor: "send_email"}}, msg: "started with a decision cannot start an op"},
		{name: "started with a decision without summary", history: "new", ev: &events.Started{OpHeader: stateHdr, Attempt: "a1",
			Decision: &events.Decided{OpHeader: stateHdr}, Claim: &events.Claim{Executor: "send_email"}}, msg: "started with a decision cannot start an op"},
		{name: "claiming started while held", history: "held", ev: evs["claiming a1"], msg: "started not allowed in state held"},
		{name: "claimed while held", history: "held", ev: evs["claimed a1"], msg: "claimed not allowed in state held"},
		{name: "expired after grant", history: "granted", ev: evs["expired"], msg: "expired not allowed in state granted"},
		{name: "granted twice", history: "granted", ev: evs["granted"], msg: "granted not allowed in state granted"},
		{name: "second scrubbed", history: "completed scrubbed", ev: evs["scrubbed"], msg: "scrubbed not allowed in state completed"},
		{name: "scrubbed before terminal", history: "executing", ev: evs["scrubbed"], msg: "scrubbed not allowed in state executing"},
		{name: "completed twice", history: "completed", ev: evs["completed a1"], msg: "completed not allowed in state completed"},
		{name: "claimed after completed", history: "completed", ev: evs["claimed a2 recov a1"], msg: "claimed not allowed in state completed"},
		{name: "failed after ambiguous", history: "ambiguous", ev: evs["failed a1"], msg: "failed not allowed in state ambiguous"},
		{name: "granted after expired", history: "expired", ev: evs["granted"], msg: "granted not allowed in state expired"},
		{name: "decided after denied", history: "denied", ev: evs["decided"], msg: "decided not allowed in state denied"},
		{name: "event of another op", history: "granted", ev: otherOp, msg: "applied to op " + testOpID},
		{name: "request is not an op event", history: "ready", ev: &events.Request{Workspace: "acme"}, msg: "*events.Request is not an op event"},
		{name: "rejected is not an op event", history: "new", ev: &events.Rejected{Code: events.CodeInvalidArgs}, msg: "*events.Rejected is not an op event"},
		{name: "struct value, not pointer", history: "new", ev: events.Decided{OpHeader: stateHdr, Request: testSummary()}, msg: "events.Decided is not an op event"},
		{name: "nil event", history: "ready", ev: nil, msg: "<nil> is not an op event"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op := opAfter(t, tt.history)
			before := *op
			err := op.Apply(tt.ev, 100, t0.Add(time.Hour))
			require.Error(t, err)
			assert.Equal(t, events.CodeInvalidEvent, events.CodeOf(err))
			assert.Contains(t, err.Error(), tt.msg)
			assert.Equal(t, before, *op)
		})
	}
}

func TestApplyLifecycle(t *testing.T) {
	evs := stateEvents()
	op := &events.Op{}
	steps := []struct {
		ev    string
		state events.State
	}{
		{"held+summary", events.StateHeld},
		{"granted", events.StateGranted},
		{"decided+summary", events.StateReady},
		{"claimed a1", events.StateExecuting},
		{"claimed a2 recov a1", events.StateExecuting},
		{"completed a1", ""}, // a1 was superseded by a2
		{"scrubbed", ""},     // not terminal yet
	}
	seq := uint64(1)
	for _, s := range steps {
		err := op.Apply(evs[s.ev], seq, t0.Add(time.Duration(seq)*time.Minute))
		if s.state == "" {
			requireCode(t, err, events.CodeInvalidEvent)
			continue
		}
		require.NoError(t, err, s.ev)
		assert.Equal(t, s.state, op.State, s.ev)
		seq++
	}
	done := &events.Completed{OpHeader: stateHdr, Attempt: "a2", ResultDigest: "sha256:r9", ResultBytes: 24, DurationMS: 40, Recovered: true}
	require.NoError(t, op.Apply(done, 6, t0.Add(6*time.Minute)))
	require.NoError(t, op.Apply(evs["scrubbed"], 7, t0.Add(7*time.Minute)))

	sum := testSummary()
	holdExp := t0.Add(time.Hour)
	grantedAt := t0.Add(2 * time.Minute) // the second event
	claimedAt := t0.Add(5 * time.Minute) // the recovery's claim
	want := events.Op{
		ID: testOpID, Workspace: "acme", State: events.StateCompleted,
		Agent: sum.Agent, Tool: sum.Tool, Class: sum.Class, Fingerprint: sum.Fingerprint,
		ArgsDigest: sum.ArgsDigest, RequestSeq: sum.RequestSeq,
		PolicyHash: "sha256:p1", Reason: "tool allowed", HoldID: "hold_1",
		HoldExpiresAt: &holdExp, Approver: "alice", Resolution: "grant", ResolvedAt: &grantedAt,
		Attempt: "a2", Attempts: 2, ClaimedAt: &claimedAt,
		ResultDigest: "sha256:r9", ResultBytes: 24,
		Scrubbed: true,
		Version:  7, FirstSeq: 1,
		CreatedAt: t0.Add(time.Minute), UpdatedAt: t0.Add(7 * time.Minute),
	}
	assert.Equal(t, want, *op)
	assert.Equal(t, testOpID+" acme/send_email completed", op.String())
}

func TestApplyFields(t *testing.T) {
	evs := stateEvents()
	sum := testSummary()
	tests := []struct {
		name    string
		history string
		ev      string
		check   func(t *testing.T, op *events.Op)
	}{
		{name: "decided records the summary", history: "new", ev: "decided+summary", check: func(t *testing.T, op *events.Op) {
			assert.Equal(t, sum.Agent, op.Agent)
			assert.Equal(t, sum.Tool, op.Tool)
			assert.Equal(t, sum.Class, op.Class)
			assert.Equal(t, sum.Fingerprint, op.Fingerprint)
			assert.Equal(t, sum.ArgsDigest, op.ArgsDigest)
			assert.Equal(t, sum.RequestSeq, op.RequestSeq)
			assert.Equal(t, "sha256:p1", op.PolicyHash)
			assert.Equal(t, "tool allowed", op.Reason)
			assert.Empty(t, op.HoldID)
		}},
		{name: "started with a decision records it and the claim", history: "new", ev: "starting a1", check: func(t *testing.T, op *events.Op) {
			assert.Equal(t, sum.Agent, op.Agent)
			assert.Equal(t, sum.Tool, op.Tool)
			assert.Equal(t, sum.Fingerprint, op.Fingerprint)
			assert.Equal(t, sum.ArgsDigest, op.ArgsDigest)
			assert.Equal(t, sum.RequestSeq, op.RequestSeq)
			assert.Equal(t, "sha256:p1", op.PolicyHash)
			assert.Equal(t, "tool allowed", op.Reason)
			assert.Equal(t, "a1", op.Attempt)
			assert.Equal(t, 1, op.Attempts)
			assert.True(t, op.Started)
		}},
		{name: "held records the hold", history: "new", ev: "held+summary", check: func(t *testing.T, op *events.Op) {
			assert.Equal(t, "hold_1", op.HoldID)
			assert.Equal(t, "needs approval", op.Reason)
			assert.Equal(t, sum.Tool, op.Tool)
		}},
		{name: "granted keeps the summary", history: "held", ev: "granted", check: func(t *testing.T, op *events.Op) {
			assert.Equal(t, "looks fine", op.Reason)
			assert.Equal(t, "hold_1", op.HoldID)
			assert.Equal(t, sum.Fingerprint, op.Fingerprint)
		}},
		{name: "policy denial", history: "new", ev: "denied+summary", check: func(t *testing.T, op *events.Op) {
			assert.Equal(t, events.CodeCapabilityDenied, op.ErrorCode)
			assert.Equal(t, "destructive tool", op.Error)
			assert.Equal(t, "sha256:p1", op.PolicyHash)
			assert.Equal(t, sum.Agent, op.Agent)
		}},
		{name: "approver denial keeps the policy hash", history: "held", ev: "denied", check: func(t *testing.T, op *events.Op) {
			assert.Equal(t, "denied by bob", op.Error)
			assert.Equal(t, "sha256:p1", op.PolicyHash)
		}},
		{name: "expired", history: "held", ev: "expired", check: func(t *testing.T, op *events.Op) {
			assert.Equal(t, events.CodeHoldExpired, op.ErrorCode)
			assert.Equal(t, "hold expired unresolved", op.Error)
		}},
		{name: "claimed counts attempts", history: "ready", ev: "claimed a1", check: func(t *testing.T, op *events.Op) {
			assert.Equal(t, "a1", op.Attempt)
			assert.Equal(t, 1, op.Attempts)
		}},
		{name: "recovery claim", history: "executing", ev: "claimed a2 recov a1", check: func(t *testing.T, op *events.Op) {
			assert.Equal(t, "a2", op.Attempt)
			assert.Equal(t, 2, op.Attempts)
		}},
		{name: "a started event that claims counts the attempt, started", history: "ready", ev: "claiming a1", check: func(t *testing.T, op *events.Op) {
			assert.Equal(t, "a1", op.Attempt)
			assert.Equal(t, 1, op.Attempts)
			assert.True(t, op.Started)
			assert.Equal(t, "i1", op.Instance)
			assert.Equal(t, "h1", op.Host)
			require.NotNil(t, op.ClaimedAt)
			assert.Equal(t, t0.Add(time.Hour), *op.ClaimedAt)
		}},
		{name: "a recovery that claims by its started event", history: "claimed by started", ev: "claiming a2 recov a1", check: func(t *testing.T, op *events.Op) {
			assert.Equal(t, "a2", op.Attempt)
			assert.Equal(t, 2, op.Attempts)
			assert.True(t, op.Started)
		}},
		{name: "completed keeps the result's digest and size", history: "executing", ev: "completed a1", check: func(t *testing.T, op *events.Op) {
			assert.Equal(t, "sha256:r1", op.ResultDigest)
			assert.Equal(t, 13, op.ResultBytes)
			assert.Empty(t, op.ErrorCode)
		}},
		{name: "failed", history: "executing", ev: "failed a1", check: func(t *testing.T, op *events.Op) {
			assert.Equal(t, events.CodeExecutorFailed, op.ErrorCode)
			assert.Equal(t, "smtp 550", op.Error)
			assert.Empty(t, op.ResultDigest)
		}},
		{name: "failed from ready", history: "ready", ev: "failed", check: func(t *testing.T, op *events.Op) {
			assert.Equal(t, events.CodeRequestUnavailable, op.ErrorCode)
			assert.Equal(t, 0, op.Attempts)
		}},
		{name: "ambiguous", history: "executing", ev: "ambiguous a1", check: func(t *testing.T, op *events.Op) {
			assert.Equal(t, events.CodeAmbiguous, op.ErrorCode)
			assert.Equal(t, "request sent, no reply", op.Error)
		}},
		{name: "scrubbed keeps the result digest", history: "completed", ev: "scrubbed", check: func(t *testing.T, op *events.Op) {
			assert.True(t, op.Scrubbed)
			assert.Equal(t, "sha256:r1", op.ResultDigest)
			assert.Equal(t, events.StateCompleted, op.State)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op := opAfter(t, tt.history)
			require.NoError(t, op.Apply(evs[tt.ev], 100, t0.Add(time.Hour)))
			tt.check(t, op)
		})
	}
}

func TestStateTerminal(t *testing.T) {
	terminal := map[events.State]bool{
		events.StateCompleted: true, events.StateFailed: true, events.StateDenied: true,
		events.StateExpired: true, events.StateAmbiguous: true,
	}
	for _, s := range append([]events.State{events.StateNew}, events.AllStates...) {
		t.Run(fmt.Sprintf("%q", s), func(t *testing.T) {
			assert.Equal(t, terminal[s], s.Terminal())
		})
	}
}

func TestParseState(t *testing.T) {
	for _, s := range events.AllStates {
		got, err := events.ParseState(string(s))
		require.NoError(t, err)
		assert.Equal(t, s, got)
	}
	for _, bad := range []string{"", "READY", "scrubbed", "new"} {
		_, err := events.ParseState(bad)
		requireCode(t, err, events.CodeInvalidQuery)
	}
}
