// Package conformance is the test suite every executor.Executor must pass.
// A test of an executor's package describes the executor with a Harness
// and calls Run:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, conformance.Harness{New: newFixture, Repeat: conformance.RepeatRefused})
//	}
//
// # The contract it checks
//
// The runner (package executor) claims an op with a fresh attempt id,
// calls Prepare (for a Preparer), stores the attempt's started event, and
// only then calls Execute, at most once per attempt. It starts a new
// attempt of an op only when the previous one never started, or when
// Recover answered Rerun for it; it calls Recover only for an attempt that
// started, on the instance that made it (Lost.Own) or on another. From
// that, and from executor.go, each executor owes:
//
//   - result: a completed call returns valid JSON of at most
//     events.MaxResultBytes (compacted), and its effect happened once;
//   - failure means no effect: an error other than EXECUTION_AMBIGUOUS
//     promises the call had no effect, and bad input is an *events.Error
//     with a stable code before anything runs;
//   - recovery: for an attempt of its own instance that never ran, Recover
//     answers Rerun (it can prove nothing ran), never Done; for one that
//     completed, Done with the same result (Rerun only if calls are safe to
//     repeat); for another instance's attempt it has no record of, never
//     Done and never Rerun unless its records are shared by every instance
//     (RecoversElsewhere) or calls are safe to repeat; Recover and Prepare
//     have no effect, and asking twice gives the same answer;
//   - no double effect: because the runner reruns only on Rerun, the second
//     point is what keeps an effect from happening twice. What Execute does
//     when handed a new attempt of a completed op anyway is declared by the
//     harness (Repeat) and checked, so it is explicit, not assumed;
//   - cancellation: a call whose context ends returns an error within
//     Prompt, and Recover afterwards never answers Done with a result that
//     passes for a normal one, nor Rerun for an attempt whose effect
//     happened;
//   - concurrency: calls of different ops at once each take effect once
//     (run with -race);
//   - limits: calls at the harness's declared limits (huge output, a
//     timeout) still give a storable result, or a clear error code.
//
// # Subtests
//
// identity, result, recover/never-ran, recover/completed,
// recover/elsewhere-never-ran, recover/elsewhere-completed, second-attempt,
// bad/<name>, operands, cancel/before, cancel/running, cancel/deadline,
// concurrency, limits/<name>. Harness.Known skips named subtests that an
// executor is known to fail, with the reason, so a failure is recorded and
// not hidden by a weaker check.
package conformance
