package conformance

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/consumers/executor"
)

// deadline is the context deadline of cancel/deadline.
const deadline = 200 * time.Millisecond

// cancelBefore: a call whose context ended before Execute. A slow call
// must then return an error; a quick one (when the fixture has no slow
// call) may also complete, and then it took effect once.
func (s *suite) cancelBefore(t *testing.T, f Fixture) {
	c, slow := f.Call, true
	if f.Slow != nil {
		c = f.Slow
	} else {
		slow = false
	}
	call := prep(t, f, c(0))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	res, err := f.Executor.Execute(ctx, call)
	require.Less(t, time.Since(start), Prompt, "Execute under an ended context must return promptly")
	if err == nil {
		require.False(t, slow, "a slow call under an ended context returned a result: %.200s", res)
		requireStorable(t, res)
		requireEffects(t, f, call, 1, "a completed call takes effect once")
		return
	}
	s.afterCancel(t, f, call)
}

// cancelRunning: a slow call whose context ends once it has started.
func (s *suite) cancelRunning(t *testing.T, f Fixture) {
	slow := s.slow(t, f, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	type out struct {
		res json.RawMessage
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := f.Executor.Execute(ctx, slow)
		done <- out{res, err}
	}()
	var o out
	started, returned := false, false
	for end := time.Now().Add(Prompt); !started && !returned && time.Now().Before(end); {
		select {
		case o = <-done:
			returned = true
		case <-time.After(10 * time.Millisecond):
			started = effects(f, slow) > 0
		}
	}
	require.False(t, returned, "the slow call returned before its context ended (err %v)", o.err)
	require.True(t, started, "the slow call did not start within %s (Effects stayed 0)", Prompt)
	cancel()
	select {
	case o = <-done:
	case <-time.After(Prompt):
		t.Fatalf("Execute did not return within %s after its context ended", Prompt)
	}
	require.Error(t, o.err, "a slow call whose context ended returned a result: %.200s", o.res)
	requireEffects(t, f, slow, 1, "the slow call started once")
	s.afterCancel(t, f, slow)
}

// cancelDeadline: a slow call under a context with a short deadline.
func (s *suite) cancelDeadline(t *testing.T, f Fixture) {
	slow := s.slow(t, f, 2)
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	start := time.Now()
	res, err := f.Executor.Execute(ctx, slow)
	require.Error(t, err, "a slow call past its deadline returned a result: %.200s", res)
	require.Less(t, time.Since(start), deadline+Prompt, "Execute must return promptly once its deadline passed")
	s.afterCancel(t, f, slow)
}

// slow returns slow call i, or skips the subtest when there is none.
func (s *suite) slow(t *testing.T, f Fixture, i int) executor.Call {
	t.Helper()
	if f.Slow == nil {
		t.Skip("the fixture has no slow call")
	}
	return prep(t, f, f.Slow(i))
}

// afterCancel checks what Recover says of a call whose Execute returned
// an error because its context ended, as if its runner had then died:
// Rerun only if its effect did not happen (or calls are safe to repeat),
// Done only with a result that says the call was cut short. The call may
// still be in flight (a remote call was sent before the context ended),
// so its effect is counted after Recover answered.
func (s *suite) afterCancel(t *testing.T, f Fixture, slow executor.Call) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), Prompt)
	rec, err := f.Executor.Recover(ctx, slow, own(slow))
	cancel()
	n := effects(f, slow)
	if err != nil {
		// "Ask again later" (the call may still be running somewhere):
		// the claim stands and nothing was decided.
		require.LessOrEqual(t, n, 1, "the slow call took effect more than once")
		return
	}
	checkAction(t, rec)
	require.LessOrEqual(t, n, 1, "the slow call took effect more than once")
	switch rec.Action {
	case executor.Rerun:
		require.True(t, n == 0 || s.h.SafeToRepeat,
			"Recover answered Rerun for a cancelled attempt whose effect happened: the runner would run it twice")
	case executor.Done:
		require.NotNil(t, s.h.Interrupted,
			"Recover answered Done (result %.200s) for a cancelled call; that needs Harness.Interrupted to check the result says it was cut short", rec.Result)
		requireStorable(t, rec.Result)
		s.h.Interrupted(t, rec.Result)
	}
}
