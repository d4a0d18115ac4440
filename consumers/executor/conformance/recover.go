package conformance

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/consumers/executor"
)

// recoverNeverRan: an attempt of this instance whose runner died after its
// started event and before Execute. Recover must answer Rerun (Ambiguous
// or Defer only if declared), never Done, with no effect and the same
// answer when asked again; and the rerun the runner then makes under a new
// attempt must take effect once.
func (s *suite) recoverNeverRan(t *testing.T, f Fixture) {
	c := prep(t, f, f.Call(0))
	lost := own(c)
	first := recoverAttempt(t, f, c, lost)
	switch first.Action {
	case executor.Done:
		t.Fatalf("Recover answered Done (result %.200s) for attempt %s, which never ran", first.Result, lost.Attempt)
	case executor.Ambiguous, executor.Defer:
		require.True(t, s.h.MayBeAmbiguous,
			"Recover answered %s (%q) for an attempt of its own instance that never ran; it owes Rerun unless the harness declares MayBeAmbiguous", first.Action, first.Known)
	}
	second := recoverAttempt(t, f, c, lost)
	require.Equal(t, first.Action, second.Action, "Recover of one attempt answered differently when asked again")
	requireEffects(t, f, c, 0, "nothing ran, yet the effect happened")
	if first.Action != executor.Rerun {
		return
	}
	rerun := again(t, f, c)
	execute(t, f, rerun)
	requireEffects(t, f, c, 1, "the rerun after Rerun takes effect once")
}

// recoverElsewhereNeverRan: an attempt of another instance that started
// and never reached Execute, recovered here. Nothing this instance keeps
// can prove that attempt took no effect: Recover must not answer Done, nor
// Rerun unless calls are safe to repeat or the executor's records are
// shared by every instance (RecoversElsewhere).
func (s *suite) recoverElsewhereNeverRan(t *testing.T, f Fixture) {
	c := prep(t, f, f.Call(0))
	lost := elsewhere(c)
	first := recoverAttempt(t, f, c, lost)
	switch first.Action {
	case executor.Done:
		t.Fatalf("Recover answered Done (result %.200s) for attempt %s of another instance, which never ran", first.Result, lost.Attempt)
	case executor.Rerun:
		require.True(t, s.h.SafeToRepeat || s.h.RecoversElsewhere,
			"Recover answered Rerun for another instance's started attempt it has no record of: that attempt may have taken effect there, and the runner would run it twice; answer Defer or Ambiguous, or declare RecoversElsewhere if the executor's records are shared")
	}
	second := recoverAttempt(t, f, c, lost)
	require.Equal(t, first.Action, second.Action, "Recover of one attempt answered differently when asked again")
	requireEffects(t, f, c, 0, "nothing ran, yet the effect happened")
	if first.Action == executor.Rerun {
		execute(t, f, again(t, f, c))
		requireEffects(t, f, c, 1, "the rerun after Rerun takes effect once")
	}
}

// recoverElsewhereCompleted: an attempt that completed, recovered as
// another instance's. Recover must not answer Rerun (unless SafeToRepeat);
// Done must carry the same result; an executor that declares
// RecoversElsewhere owes Done.
func (s *suite) recoverElsewhereCompleted(t *testing.T, f Fixture) {
	c := prep(t, f, f.Call(0))
	res := execute(t, f, c)
	requireEffects(t, f, c, 1)
	rec := recoverAttempt(t, f, c, elsewhere(c))
	switch rec.Action {
	case executor.Done:
		requireStorable(t, rec.Result)
		assert.JSONEq(t, string(orNull(res)), string(orNull(rec.Result)), "Recover's Done result differs from what Execute returned")
	case executor.Rerun:
		require.True(t, s.h.SafeToRepeat, "Recover answered Rerun for an attempt that ran to completion: the runner would run it twice")
	default:
		require.False(t, s.h.RecoversElsewhere && !s.h.MayBeAmbiguous,
			"declared RecoversElsewhere, yet Recover answered %s (%q) for a completed attempt of another instance; it owes Done", rec.Action, rec.Known)
	}
	requireEffects(t, f, c, 1)
}

// recoverCompleted: a call that completed and whose runner died before it
// stored the result. Recover must answer Done with the same result (Rerun
// only if SafeToRepeat, Ambiguous only if MayBeAmbiguous), with no effect,
// and the same answer when asked again.
func (s *suite) recoverCompleted(t *testing.T, f Fixture) {
	c := prep(t, f, f.Call(0))
	res := execute(t, f, c)
	requireEffects(t, f, c, 1)
	var first executor.Recovery
	for i := range 2 {
		rec := recoverAttempt(t, f, c, own(c))
		switch rec.Action {
		case executor.Done:
			requireStorable(t, rec.Result)
			assert.JSONEq(t, string(orNull(res)), string(orNull(rec.Result)), "Recover's Done result differs from what Execute returned")
		case executor.Rerun:
			require.True(t, s.h.SafeToRepeat,
				"Recover answered Rerun for an attempt that ran to completion: the runner would run it twice")
		case executor.Ambiguous, executor.Defer:
			require.True(t, s.h.MayBeAmbiguous,
				"Recover answered %s (%q) for an attempt that completed; it owes Done unless the harness declares MayBeAmbiguous", rec.Action, rec.Known)
		}
		if i == 0 {
			first = rec
		} else {
			require.Equal(t, first.Action, rec.Action, "Recover of one attempt answered differently when asked again")
		}
	}
	requireEffects(t, f, c, 1)
}

// secondAttempt holds the executor to its Repeat declaration: Execute of
// a new attempt of an op whose first attempt completed.
func (s *suite) secondAttempt(t *testing.T, f Fixture) {
	c := prep(t, f, f.Call(0))
	res := execute(t, f, c)
	requireEffects(t, f, c, 1)
	next, err := attempt(t, f, c)
	var res2 json.RawMessage
	if err == nil {
		res2, err = f.Executor.Execute(t.Context(), next)
	}
	switch s.h.Repeat {
	case RepeatRuns:
		require.NoError(t, err, "declared RepeatRuns: the second attempt runs")
		requireStorable(t, res2)
		requireEffects(t, f, c, 2, "declared RepeatRuns: the effect happens again")
	case RepeatRefused:
		require.Error(t, err, "declared RepeatRefused: the second attempt is refused")
		requireEffects(t, f, c, 1, "declared RepeatRefused: a refused second attempt has no effect")
	case RepeatReplays:
		require.NoError(t, err, "declared RepeatReplays: the second attempt returns the first result")
		assert.JSONEq(t, string(orNull(res)), string(orNull(res2)), "declared RepeatReplays: the second attempt returns the first result")
		requireEffects(t, f, c, 1, "declared RepeatReplays: the effect does not happen again")
	}
}
