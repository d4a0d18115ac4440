package conformance

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
)

// bad: Execute refuses with the declared code and nothing happens; a
// recovery of the refused attempt does not make up a result; Operands, if
// the executor has it, agrees.
func (s *suite) bad(t *testing.T, f Fixture, b Bad) {
	valid := prep(t, f, f.Call(0))
	c := b.Call(valid)
	require.Equal(t, valid.OpID, c.OpID, "Bad.Call must keep the op id")
	var e *events.Error
	c, perr := prepared(t, f, c)
	if perr != nil {
		require.ErrorAs(t, perr, &e, "Prepare must refuse bad input with an *events.Error")
		require.Equal(t, b.Code, e.Code, "Prepare refused with the wrong code: %v", perr)
	}
	_, err := f.Executor.Execute(t.Context(), c)
	require.ErrorAs(t, err, &e, "bad input must be refused with an *events.Error")
	require.Equal(t, b.Code, e.Code, "refused with the wrong code: %v", err)
	requireEffects(t, f, valid, 0, "a refused call had an effect")

	rec := recoverAttempt(t, f, c, own(c))
	require.NotEqual(t, executor.Done, rec.Action,
		"Recover answered Done (result %.200s) for an attempt that was refused", rec.Result)
	requireEffects(t, f, valid, 0)

	op, ok := f.Executor.(executor.Operands)
	if !ok {
		return
	}
	_, oerr := op.Operands(t.Context(), c.Workspace, c.Args)
	if b.Code == events.CodeInvalidArgs {
		// executor.Operands: args that do not parse are the same error.
		require.Error(t, oerr, "Operands accepted args that Execute refuses as INVALID_ARGS")
	}
	if oerr != nil {
		require.ErrorAs(t, oerr, &e, "Operands must refuse with an *events.Error")
		require.Equal(t, b.Code, e.Code, "Operands refused with another code than Execute: %v", oerr)
	}
	requireEffects(t, f, valid, 0, "Operands had an effect")
}

var operandHash = regexp.MustCompile(`^(absent|sha256:[0-9a-f]{64})$`)

// operands: for a valid call, relative paths to content hashes, the same
// when asked twice, and no effect.
func (s *suite) operands(t *testing.T, f Fixture) {
	op, ok := f.Executor.(executor.Operands)
	if !ok {
		t.Skip("the executor does not implement executor.Operands")
	}
	c := prep(t, f, f.Call(0))
	m, err := op.Operands(t.Context(), c.Workspace, c.Args)
	require.NoError(t, err, "Operands of a valid call")
	for path, hash := range m {
		assert.True(t, filepath.IsLocal(path) && filepath.ToSlash(filepath.Clean(path)) == path,
			"operand %q is not a clean path relative to the workspace root", path)
		assert.Regexp(t, operandHash, hash, "operand %q", path)
	}
	m2, err := op.Operands(t.Context(), c.Workspace, c.Args)
	require.NoError(t, err)
	assert.Equal(t, m, m2, "Operands of one call changed with nothing touched")
	requireEffects(t, f, c, 0, "Operands had an effect")
}

// concurrency: Concurrency calls of different ops at once each take
// effect once; their recoveries, at once too, answer as for one.
func (s *suite) concurrency(t *testing.T, f Fixture) {
	calls := make([]executor.Call, Concurrency)
	for i := range calls {
		calls[i] = prep(t, f, f.Call(i))
	}
	results := make([]json.RawMessage, len(calls))
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() { results[i], errs[i] = f.Executor.Execute(t.Context(), c) })
	}
	wg.Wait()
	for i, c := range calls {
		require.NoError(t, errs[i], "call %d", i)
		requireStorable(t, results[i])
		requireEffects(t, f, c, 1, "call %d", i)
	}

	recs := make([]executor.Recovery, len(calls))
	for i, c := range calls {
		wg.Go(func() { recs[i], errs[i] = f.Executor.Recover(t.Context(), c, own(c)) })
	}
	wg.Wait()
	for i, c := range calls {
		require.NoError(t, errs[i], "Recover of call %d", i)
		switch recs[i].Action {
		case executor.Done:
			assert.JSONEq(t, string(orNull(results[i])), string(orNull(recs[i].Result)), "call %d", i)
		case executor.Rerun:
			assert.True(t, s.h.SafeToRepeat, "call %d: Recover answered Rerun for an attempt that completed", i)
		case executor.Ambiguous, executor.Defer:
			assert.True(t, s.h.MayBeAmbiguous, "call %d: Recover answered %s for an attempt that completed", i, recs[i].Action)
		default:
			t.Errorf("call %d: Recover returned unknown action %d", i, recs[i].Action)
		}
		requireEffects(t, f, c, 1, "call %d after Recover", i)
	}
}

// limit: a call at a limit returns within Prompt, and either a storable
// result with the effect done once or an *events.Error; an error other
// than EXECUTION_AMBIGUOUS promises no effect.
func (s *suite) limit(t *testing.T, f Fixture, l Limit) {
	valid := prep(t, f, f.Call(0))
	c := l.Call(valid)
	require.Equal(t, valid.OpID, c.OpID, "Limit.Call must keep the op id")
	start := time.Now()
	c, err := prepared(t, f, c)
	var res json.RawMessage
	if err == nil {
		res, err = f.Executor.Execute(t.Context(), c)
	}
	require.Less(t, time.Since(start), Prompt, "a call at a limit must still end promptly")
	if err == nil {
		requireStorable(t, res)
		requireEffects(t, f, valid, 1, "a completed call takes effect once")
	} else {
		var e *events.Error
		require.ErrorAs(t, err, &e, "a call at a limit must end with a result or an *events.Error")
		if e.Code != events.CodeAmbiguous {
			requireEffects(t, f, valid, 0, "the call failed with %s, which promises no effect", e.Code)
		}
	}
	if l.Check != nil {
		l.Check(t, res, err)
	}
}
