// Package failpoint names the points in the execution path where a crash
// test kills the process: once an attempt is prepared and before the
// started event that claims the op is stored, after
// the started event and before the executor runs, after
// the side effect and before its result is stored, after the result and
// before the acknowledgement, between the files of a patch. A failpoint
// can also inject an error where a result is stored.
//
// Failpoints exist only in binaries built with the airlocktest tag. There,
// AIRLOCK_FAILPOINT arms them: a comma-separated list of NAME or
// NAME:TOOL (armed for that tool only), NAME@N (kill at the Nth hit, not
// the first), NAME=error for the error points, NAME=pause:DURATION
// (stop there once, for that long, instead of dying) and
// NAME=pause-each:DURATION (stop there at every hit). An armed kill point
// sends the process SIGKILL, so no deferred code, flush or shutdown runs:
// what the crash leaves is what a real crash would. In every other build Hit and Err do nothing and cost nothing.
package failpoint

// The failpoints.
const (
	// BeforeStart: the attempt is prepared (operands checked, evidence
	// taken), its started event, which claims the op, is not stored;
	// nothing has run.
	BeforeStart = "before-start"
	// AfterStarted: the attempt's started event is stored, the executor
	// has not been called.
	AfterStarted = "after-started"
	// AfterEffect: the executor's side effect happened, its result is not
	// stored. Executors call it right after the effect.
	AfterEffect = "after-effect"
	// AfterResultKept: a completed op's sealed result is stored in
	// AIRLOCK_RESULTS, its completed event is not.
	AfterResultKept = "after-result-kept"
	// AfterResult: the terminal event is stored, the work item is not
	// acknowledged.
	AfterResult = "after-result"
	// PatchBetweenFiles: a patch wrote some of its files, not all.
	PatchBetweenFiles = "patch-between-files"
	// BeforePush: a gate appended the grant of an op that its own
	// process does not start and answered the approver; it has not
	// pushed the op's resume (ADR 0029). Paused there, a test lets the
	// grant's delivery start the op elsewhere first.
	BeforePush = "before-push"
	// RecordError (an error point): storing the terminal event fails
	// after the side effect, as a NATS write error would.
	RecordError = "record-error"

	// The audit log's write path, in the projector:
	// AuditBeforeCommit: leaves and hashes are in a batch, not committed.
	AuditBeforeCommit = "audit-before-commit"
	// AuditAfterCommit: a batch of leaves and state is committed, no
	// checkpoint is due or signed.
	AuditAfterCommit = "audit-after-commit"
	// AuditAfterCheckpoint: a checkpoint is committed with its batch,
	// not yet in JetStream.
	AuditAfterCheckpoint = "audit-after-checkpoint"
	// AuditAfterPublish: the checkpoint is in JetStream too; the
	// projector has not moved on.
	AuditAfterPublish = "audit-after-publish"
)

// Kills lists the kill points, for harnesses that try each.
var Kills = []string{BeforeStart, AfterStarted, AfterEffect, AfterResultKept, AfterResult, PatchBetweenFiles}

// EnvVar arms failpoints in test builds.
const EnvVar = "AIRLOCK_FAILPOINT"
