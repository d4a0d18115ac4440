// Package executor runs ready ops exactly once. An Executor does one tool's
// work; the Runner takes that tool's work items, claims each op on its own
// subject with compare-and-swap before any side effect, runs the executor,
// and appends the result before it acks the work item.
//
// # Contract
//
//   - A claim (op.claimed with a fresh attempt id) is on the op's subject
//     before Execute is called. Two runners racing for one op: one claim
//     wins, the other reads the winner's event and drops the work item.
//   - completed is appended, with the result, before the work item is acked.
//     If it cannot be appended the work item is not acked, the caller never
//     sees success, and recovery decides.
//   - A work item that comes back while its op is still claimed means the
//     claiming runner is gone (it heartbeats while it runs). The executor's
//     Recover says what happens: run again, completed from its own record,
//     or ambiguous.
package executor
