package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
)

// Run checks the executor h describes, one subtest per property (the
// package doc lists them). Each subtest gets a fresh fixture from h.New.
func Run(t *testing.T, h Harness) {
	t.Helper()
	require.NotNil(t, h.New, "Harness.New is required")
	require.Contains(t, []Repeat{RepeatRuns, RepeatRefused, RepeatReplays}, h.Repeat,
		"Harness.Repeat must declare what a second attempt of a completed op does")
	for _, b := range h.Bad {
		require.NotEmpty(t, b.Name, "every Bad needs a Name")
		require.NotNil(t, b.Call, "Bad %q needs a Call", b.Name)
		require.NotEqual(t, events.CodeAmbiguous, b.Code, "Bad %q: EXECUTION_AMBIGUOUS is not a refusal", b.Name)
		require.True(t, slices.Contains(events.AllCodes, b.Code), "Bad %q: unknown code %q", b.Name, b.Code)
	}
	for _, l := range h.Limits {
		require.NotEmpty(t, l.Name, "every Limit needs a Name")
		require.NotNil(t, l.Call, "Limit %q needs a Call", l.Name)
	}
	s := &suite{h: h, names: map[string]bool{}}

	s.sub(t, "", "identity", s.identity)
	s.sub(t, "", "result", s.result)
	t.Run("recover", func(t *testing.T) {
		s.sub(t, "recover", "never-ran", s.recoverNeverRan)
		s.sub(t, "recover", "completed", s.recoverCompleted)
		s.sub(t, "recover", "elsewhere-never-ran", s.recoverElsewhereNeverRan)
		s.sub(t, "recover", "elsewhere-completed", s.recoverElsewhereCompleted)
	})
	s.sub(t, "", "second-attempt", s.secondAttempt)
	t.Run("bad", func(t *testing.T) {
		if len(h.Bad) == 0 {
			t.Skip("the harness declares no bad input: the executor accepts any args")
		}
		for _, b := range h.Bad {
			s.sub(t, "bad", b.Name, func(t *testing.T, f Fixture) { s.bad(t, f, b) })
		}
	})
	s.sub(t, "", "operands", s.operands)
	t.Run("cancel", func(t *testing.T) {
		s.sub(t, "cancel", "before", s.cancelBefore)
		s.sub(t, "cancel", "running", s.cancelRunning)
		s.sub(t, "cancel", "deadline", s.cancelDeadline)
	})
	s.sub(t, "", "concurrency", s.concurrency)
	t.Run("limits", func(t *testing.T) {
		if len(h.Limits) == 0 {
			t.Skip("the harness declares no limits")
		}
		for _, l := range h.Limits {
			s.sub(t, "limits", l.Name, func(t *testing.T, f Fixture) { s.limit(t, f, l) })
		}
	})

	var stale []string
	for name := range h.Known {
		if !s.names[name] {
			stale = append(stale, name)
		}
	}
	sort.Strings(stale)
	assert.Empty(t, stale, "Harness.Known names subtests that do not exist")
}

// suite is one Run.
type suite struct {
	h     Harness
	names map[string]bool // every subtest key, for checking Known
}

// sub runs fn as subtest name of group on a fresh fixture, unless Known
// skips it.
func (s *suite) sub(t *testing.T, group, name string, fn func(*testing.T, Fixture)) {
	t.Helper()
	key := name
	if group != "" {
		key = group + "/" + name
	}
	s.names[key] = true
	t.Run(name, func(t *testing.T) {
		if why, ok := s.h.Known[key]; ok {
			t.Skip("known: " + why)
		}
		fn(t, s.fixture(t))
	})
}

// fixture builds and checks a fresh fixture.
func (s *suite) fixture(t *testing.T) Fixture {
	t.Helper()
	f := s.h.New(t)
	require.NotNil(t, f.Executor, "Fixture.Executor is required")
	require.NotNil(t, f.Call, "Fixture.Call is required")
	if f.Slow != nil {
		require.NotNil(t, f.Effects, "Fixture.Slow needs Fixture.Effects to see the call start")
	}
	return f
}

// prep completes a call from the fixture: the executor's tool and a fresh
// attempt, as a runner's claim would give it, and the executor's evidence
// (Preparer), as the runner takes it before the started event.
func prep(t *testing.T, f Fixture, c executor.Call) executor.Call {
	t.Helper()
	require.True(t, events.ValidOpID(c.OpID), "Fixture call has op id %q, want op_<32 hex>", c.OpID)
	canon, err := events.Canonical(c.Args)
	require.NoError(t, err, "Fixture call args are not JSON")
	require.Equal(t, string(canon), string(c.Args), "Fixture call args must be canonical JSON, as the runner passes them")
	c.Tool = f.Executor.Tool()
	return again(t, f, c)
}

// again is c under a new attempt, with that attempt's evidence.
func again(t *testing.T, f Fixture, c executor.Call) executor.Call {
	t.Helper()
	c, err := attempt(t, f, c)
	require.NoError(t, err, "Prepare of a valid call")
	return c
}

// attempt is c under a new attempt, prepared as the runner prepares it:
// Prepare's error is the call's refusal, before anything ran.
func attempt(t *testing.T, f Fixture, c executor.Call) (executor.Call, error) {
	t.Helper()
	c.Attempt = nuid.Next()
	return prepared(t, f, c)
}

// prepared is c with its evidence (Preparer), or Prepare's error, which
// must have had no effect.
func prepared(t *testing.T, f Fixture, c executor.Call) (executor.Call, error) {
	t.Helper()
	c.Evidence = nil
	p, ok := f.Executor.(executor.Preparer)
	if !ok {
		return c, nil
	}
	before := effects(f, c)
	ctx, cancel := context.WithTimeout(t.Context(), Prompt)
	ev, err := p.Prepare(ctx, c)
	cancel()
	requireEffects(t, f, c, before, "Prepare had an effect")
	if err != nil {
		return c, err
	}
	require.LessOrEqual(t, len(ev), events.MaxEvidenceBytes, "Prepare's evidence is over events.MaxEvidenceBytes")
	if len(ev) > 0 {
		require.True(t, json.Valid(ev), "Prepare's evidence is not JSON")
	}
	c.Evidence = ev
	return c, nil
}

// Instances the suite names in a Lost: this one, and another of the same
// deployment.
const (
	thisInstance  = "00000000000000aa"
	otherInstance = "00000000000000bb"
)

// own is attempt c as a recovery in the instance that made it sees it.
func own(c executor.Call) executor.Lost {
	return executor.Lost{Attempt: c.Attempt, Instance: thisInstance, Own: true, StartedAt: time.Now(), Evidence: c.Evidence}
}

// elsewhere is attempt c as a recovery in another instance sees it.
func elsewhere(c executor.Call) executor.Lost {
	l := own(c)
	l.Instance, l.Own = otherInstance, false
	return l
}

// effects counts c's effect; 0 for an executor without one.
func effects(f Fixture, c executor.Call) int {
	if f.Effects == nil {
		return 0
	}
	return f.Effects(c)
}

// requireEffects checks c's effect happened exactly n times; it checks
// nothing for an executor without an effect.
func requireEffects(t *testing.T, f Fixture, c executor.Call, n int, msgAndArgs ...any) {
	t.Helper()
	if f.Effects == nil {
		return
	}
	require.Equal(t, n, effects(f, c), msgAndArgs...)
}

// execute runs c to completion and checks its result.
func execute(t *testing.T, f Fixture, c executor.Call) json.RawMessage {
	t.Helper()
	res, err := f.Executor.Execute(t.Context(), c)
	require.NoError(t, err, "Execute of a valid call")
	requireStorable(t, res)
	return res
}

// requireStorable checks a result is what the runner can store: valid
// JSON (empty counts as null) of at most events.MaxResultBytes compacted.
func requireStorable(t *testing.T, res json.RawMessage) {
	t.Helper()
	res = orNull(res)
	require.True(t, json.Valid(res), "result is not valid JSON: %.200q", res)
	var buf bytes.Buffer
	require.NoError(t, json.Compact(&buf, res))
	require.LessOrEqual(t, buf.Len(), events.MaxResultBytes,
		"result is %d bytes compacted, over events.MaxResultBytes: the runner would fail the op with RESULT_TOO_LARGE after it took effect", buf.Len())
}

// orNull is what the runner stores for a result: empty is null.
func orNull(res json.RawMessage) json.RawMessage {
	if len(res) == 0 {
		return json.RawMessage("null")
	}
	return res
}

// recoverAttempt asks Recover about attempt lost of c's op, bounded by
// Prompt, and checks it had no effect and named a known action.
func recoverAttempt(t *testing.T, f Fixture, c executor.Call, lost executor.Lost) executor.Recovery {
	t.Helper()
	before := effects(f, c)
	rec := recoverInFlight(t, f, c, lost)
	requireEffects(t, f, c, before, "Recover itself had an effect")
	return rec
}

// recoverInFlight is recoverAttempt for an attempt whose call may still
// be in flight (a cancelled remote call was sent): its effect may happen
// while Recover runs, so Recover's own is not checked.
func recoverInFlight(t *testing.T, f Fixture, c executor.Call, lost executor.Lost) executor.Recovery {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), Prompt)
	defer cancel()
	rec, err := f.Executor.Recover(ctx, c, lost)
	require.NoError(t, err, "Recover")
	checkAction(t, rec)
	return rec
}

// checkAction checks that rec names a known action, and that an Ambiguous
// or Defer answer says what is known.
func checkAction(t *testing.T, rec executor.Recovery) {
	t.Helper()
	require.Contains(t, []executor.Action{executor.Rerun, executor.Done, executor.Ambiguous, executor.Defer}, rec.Action, "Recover returned an unknown action")
	if rec.Action == executor.Ambiguous || rec.Action == executor.Defer {
		require.NotEmpty(t, rec.Known, "an %s recovery must say what is known", rec.Action)
	}
}

func (s *suite) identity(t *testing.T, f Fixture) {
	e := f.Executor
	assert.True(t, events.ValidName(e.Tool()), "Tool %q is not a valid tool name", e.Tool())
	assert.Equal(t, e.Class(), events.ParseClass(string(e.Class())), "Class %q is not a capability class", e.Class())
}

func (s *suite) result(t *testing.T, f Fixture) {
	c := prep(t, f, f.Call(0))
	requireEffects(t, f, c, 0, "the effect happened before Execute")
	start := time.Now()
	execute(t, f, c)
	requireEffects(t, f, c, 1, "a completed call takes effect once")
	assert.Less(t, time.Since(start), Prompt, "a valid call should be quick")
}
