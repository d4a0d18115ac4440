// Package command is the "exec" tool: an executor that runs an argv as a
// child process of Airlock, once, and says "ambiguous" rather than run it
// twice.
//
// # What a call does
//
// Args are {"argv": [...], "timeout_ms": N?}, decoded strictly (ParseArgs).
// argv[0] is run directly, never through a shell: a shell runs only when
// argv[0] is one, which the policy decides by the tool's class. Before
// anything runs the argv is scanned for privilege escalation
// (CheckEscalation). The child gets only the allowed variables of
// Airlock's environment (default PATH), runs in the workspace root (or a
// fresh temporary directory), in its own process group, with stdin
// /dev/null. A timeout or the end of the caller's context kills the whole
// group with SIGKILL; so does the leader's exit, for whatever it left
// behind. stdout and stderr are kept up to a cap each. The result is
// Result as JSON.
//
// # What it is not
//
// Without bubblewrap this is not a sandbox and not a container: the child
// runs as the same user as Airlock, sees the same file system and network,
// and can do anything that user can. The escalation check is a tripwire
// for the obvious forms, not a boundary. With Config.Bubblewrap set the
// call runs under bwrap with a read-only root, a writable workspace,
// private /tmp and no network. docs/exec.md says it all in full.
//
// # Crash safety
//
// Each attempt is recorded durably in a ledger before the process is
// spawned and again, with its result, after it exited. Recover reads the
// ledger: not started means Rerun, a result means Done, started without a
// result means Ambiguous. A started attempt is never spawned again.
package command
