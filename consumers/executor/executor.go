package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/airlock-dev/airlock/internal/policy"
)

// Call is one op as an executor sees it. Args is canonical JSON; the
// executor must not keep it past the call.
type Call struct {
	OpID      string
	Workspace string
	Agent     string
	Tool      string
	Attempt   string
	Args      json.RawMessage
}

// Action is what recovery decided for an attempt whose runner was lost.
type Action int

// Recovery actions.
const (
	// Rerun runs the call again under a new claim. Only for calls that
	// are safe to repeat or that the executor can prove did not run.
	Rerun Action = iota + 1
	// Done records Result as the op's result without running again: the
	// executor's own record shows the call took effect.
	Done
	// Ambiguous ends the op as ambiguous with Known saying what is known.
	Ambiguous
)

// Recovery is an executor's verdict on a lost attempt.
type Recovery struct {
	Action Action
	Result json.RawMessage // with Done
	Known  string          // with Ambiguous
}

// Executor does one tool's work. Implementations must be safe for
// concurrent use.
type Executor interface {
	// Tool is the tool name the executor serves.
	Tool() string
	// Class is the tool's capability class.
	Class() policy.Class
	// Execute performs the call and returns its result as JSON. An
	// *events.Error fails the op with its code; any other error fails it
	// with EXECUTOR_FAILED.
	Execute(ctx context.Context, c Call) (json.RawMessage, error)
	// Recover decides the fate of attempt lost, claimed but never
	// finished by a runner that is gone.
	Recover(ctx context.Context, c Call, lost string) (Recovery, error)
}

// Operands is implemented by executors whose calls read or write files in
// the workspace (a patch's targets, a script exec runs). The gate records
// the hashes when it decides, so a hold covers them; the runner takes them
// again once it holds the claim and, if any changed, fails the op with
// OPERANDS_CHANGED before anything runs.
type Operands interface {
	// Operands returns, by path relative to the workspace root, the
	// content hash ("sha256:<hex>", or "absent" for a file that does not
	// exist) of every file the call with args would touch. A call that
	// touches none returns an empty map. Args that do not parse are the
	// same *events.Error Execute would return.
	Operands(ctx context.Context, ws string, args json.RawMessage) (map[string]string, error)
}

// Forgetter is implemented by executors that keep per-op records for
// recovery (a ledger). Once an op's terminal event is stored, nothing asks
// Recover about it again, and the runner calls Forget so the records can
// go. A crash before Forget only leaves the records behind.
type Forgetter interface {
	Forget(ctx context.Context, opID string) error
}

// Registry holds the executors of one process. It is a value, not a
// global: build one and hand it to the Runner. Register before Run; the
// registry is read-only afterwards and then safe for concurrent use.
type Registry struct {
	m map[string]Executor
}

// NewRegistry returns a registry holding execs.
func NewRegistry(execs ...Executor) (*Registry, error) {
	r := &Registry{m: make(map[string]Executor)}
	for _, e := range execs {
		if err := r.Register(e); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Register adds e; a second executor for the same tool is an error.
func (r *Registry) Register(e Executor) error {
	if _, dup := r.m[e.Tool()]; dup {
		return fmt.Errorf("executor: tool %q registered twice", e.Tool())
	}
	r.m[e.Tool()] = e
	return nil
}

// Lookup returns the executor of tool.
func (r *Registry) Lookup(tool string) (Executor, bool) {
	e, ok := r.m[tool]
	return e, ok
}

// Tools lists the registered tools, sorted.
func (r *Registry) Tools() []string {
	out := make([]string, 0, len(r.m))
	for t := range r.m {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// Classes maps each registered tool to its class, for the policy.
func (r *Registry) Classes() map[string]string {
	out := make(map[string]string, len(r.m))
	for t, e := range r.m {
		out[t] = string(e.Class())
	}
	return out
}
