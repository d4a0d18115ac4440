package conformance

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
)

// Prompt bounds how long an Execute may take to return once its context
// ended, and how long any single step of the suite may take. It catches a
// hang, not slowness: a call at an output limit (megabytes escaped into
// JSON) under the race detector on a loaded 2-core machine took 7 s.
const Prompt = 15 * time.Second

// Concurrency is how many calls the concurrency subtest runs at once.
const Concurrency = 8

// Harness describes one executor to Run. New and Repeat are required.
type Harness struct {
	// New returns a fresh fixture: an executor with state of its own
	// (temporary directories, a tool server), torn down with t. Run calls
	// it once per subtest, with that subtest's t.
	New func(t *testing.T) Fixture
	// Repeat declares what Execute does with a new attempt of an op whose
	// earlier attempt completed. The runner never does that unless
	// Recover said Rerun; the declaration makes the executor's own
	// behaviour explicit, and the second-attempt subtest holds it to it.
	Repeat Repeat
	// SafeToRepeat declares that a call may run again without harm (echo):
	// Recover may then answer Rerun for an attempt that ran.
	SafeToRepeat bool
	// RecoversElsewhere declares that the executor's records of an attempt
	// are read the same by every instance of a deployment (a tool
	// server's, the files of a workspace every serving instance shares,
	// with the started event's evidence): Recover may then answer Rerun
	// for another instance's attempt, and owes Done for one that completed.
	RecoversElsewhere bool
	// MayBeAmbiguous declares that the executor keeps no record that tells
	// a run attempt from one that never ran: Recover may answer Ambiguous
	// where Rerun (never ran) or Done (completed) is otherwise owed. It
	// never permits Done for an attempt that did not run.
	MayBeAmbiguous bool
	// Interrupted checks a result that Recover returned as Done for a slow
	// call whose context ended: the result must say the call was cut short
	// (exec: killed by SIGKILL), not pass for a normal one. Nil: Recover
	// must not answer Done after a cancellation.
	Interrupted func(t *testing.T, result json.RawMessage)
	// Bad are calls Execute must refuse with a code before anything runs.
	Bad []Bad
	// Limits are calls at the executor's limits that must still give a
	// storable result or a clear code.
	Limits []Limit
	// Known maps a subtest name ("limits/huge output") to why the
	// executor fails it today; Run skips that subtest with "known: " and
	// the reason. Every key must name a subtest Run has. It records a
	// failure to be fixed; it is not a way to relax a check.
	Known map[string]string
}

// Fixture is one executor under test and the means to drive it.
type Fixture struct {
	// Executor is the executor under test. Required.
	Executor executor.Executor
	// Call returns valid call number i: an op of its own (OpID from
	// OpID), with Workspace, Agent and Args set, whose effect Effects can
	// count. Run sets Tool and a fresh Attempt itself. Calls with
	// different i must not interfere, since they may run at once; Call
	// itself is called from the test goroutine. Required.
	Call func(i int) executor.Call
	// Effects returns how many times the side effect of c's op has
	// happened so far. Run always passes a call Call or Slow returned.
	// Nil: the executor has no side effect, and every count is 0. Safe
	// for concurrent use.
	Effects func(c executor.Call) int
	// Slow returns a call of an op of its own, like Call, that runs until
	// its context ends, its effect visible through Effects once it has
	// started (exec: a marker appended, then sleep 30). Nil skips
	// cancel/running and cancel/deadline, and cancel/before uses a call of
	// Call instead (which may then complete); set, Effects is required.
	Slow func(i int) executor.Call
}

// Repeat is what Execute does with a new attempt of a completed op.
type Repeat int

// Declarations of Harness.Repeat.
const (
	// RepeatRuns: the call runs again and its effect happens a second
	// time; the executor relies on the runner, which starts a new attempt
	// only after Recover said Rerun (exec; echo, which has no effect).
	RepeatRuns Repeat = iota + 1
	// RepeatRefused: Execute returns an error and the effect does not
	// happen again (apply_patch: PATCH_CONFLICT, the files are no longer
	// at their pre-images).
	RepeatRefused
	// RepeatReplays: Execute returns the first attempt's result without
	// running again (remote: the tool server is idempotent per op id).
	RepeatReplays
)

func (r Repeat) String() string {
	switch r {
	case RepeatRuns:
		return "runs"
	case RepeatRefused:
		return "refused"
	case RepeatReplays:
		return "replays"
	}
	return "unset"
}

// Bad is a call Execute must refuse with Code before anything runs.
type Bad struct {
	// Name names the subtest, bad/<Name>.
	Name string
	// Call derives the bad call from a valid one. It keeps the valid
	// call's op id and, where it can, its effect (a valid patch with an
	// escaping file added), so that anything done before the refusal
	// shows in Effects of the valid call. Args makes the common one.
	Call func(valid executor.Call) executor.Call
	// Code is the code of the *events.Error Execute must return.
	Code events.Code
}

// Args returns a Bad.Call or Limit.Call that replaces a valid call's args
// with raw, keeping everything else.
func Args(raw string) func(executor.Call) executor.Call {
	return func(c executor.Call) executor.Call {
		c.Args = json.RawMessage(raw)
		return c
	}
}

// Limit is a call at one of the executor's limits.
type Limit struct {
	// Name names the subtest, limits/<Name>.
	Name string
	// Call derives the call from a valid one, keeping its op id and, where
	// it can, its effect, so that Effects of the valid call counts it.
	Call func(valid executor.Call) executor.Call
	// Check checks what Execute returned, beyond what Run checks of every
	// limit (see Run); nil checks nothing more.
	Check func(t *testing.T, result json.RawMessage, err error)
}

// OpID returns a fresh, random op id of the form op_<32 hex>.
func OpID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return "op_" + hex.EncodeToString(b[:])
}
