package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/airlock-dev/airlock/events"
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
	// Evidence is what Prepare returned for this attempt, now stored in
	// its started event; nil for an executor that is not a Preparer.
	Evidence json.RawMessage
}

// Lost is an attempt whose runner is gone, as the op's events record it.
// Every process of a deployment reads the same Lost, except Own.
type Lost struct {
	// Attempt is the lost attempt's id.
	Attempt string
	// Instance and Host name the Airlock instance (a data dir) and the
	// host that claimed it, Runner the run of that instance.
	Instance, Host, Runner string
	// Own reports that the attempt was made by this instance: records the
	// executor keeps in this data dir describe it, and their absence
	// proves what they would have recorded did not happen. For another
	// instance's attempt, only records that every process reads (a tool
	// server's, the files of a shared workspace, Evidence) can tell.
	Own bool
	// StartedAt is when the attempt's started event was stored: from then
	// on it may have taken effect.
	StartedAt time.Time
	// Evidence is what Prepare returned before the attempt; nil without
	// Prepare.
	Evidence json.RawMessage
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
	// Defer says that only the attempt's own instance can tell (its
	// records are on its disk): the runner leaves the op for that
	// instance to settle for a while (Config.OwnerTries), then ends it
	// ambiguous with Known.
	Defer
)

func (a Action) String() string {
	switch a {
	case Rerun:
		return "rerun"
	case Done:
		return "done"
	case Ambiguous:
		return "ambiguous"
	case Defer:
		return "defer"
	}
	return fmt.Sprintf("action(%d)", int(a))
}

// Recovery is an executor's verdict on a lost attempt.
type Recovery struct {
	Action Action
	Result json.RawMessage // with Done
	Known  string          // with Ambiguous and Defer
}

// Executor does one tool's work. Implementations must be safe for
// concurrent use.
type Executor interface {
	// Tool is the tool name the executor serves.
	Tool() string
	// Class is the tool's capability class.
	Class() events.Class
	// Execute performs the call and returns its result as JSON. An
	// *events.Error fails the op with its code; any other error fails it
	// with EXECUTOR_FAILED.
	Execute(ctx context.Context, c Call) (json.RawMessage, error)
	// Recover decides the fate of an attempt that started (its started
	// event is stored) and never finished, because its runner is gone;
	// the runner reruns an attempt that never started without asking.
	// c.Attempt is a fresh attempt and c.Args the op's args (nil when
	// they are no longer stored). Rerun is only for a call that is safe
	// to repeat, or on evidence that the lost attempt took no effect and
	// never will: this instance's own records of its own attempt
	// (lost.Own), or records every process reads (a tool server that
	// fences the attempt, a shared workspace's files against
	// lost.Evidence). Without such evidence the answer is Defer or
	// Ambiguous.
	Recover(ctx context.Context, c Call, lost Lost) (Recovery, error)
}

// Describer is implemented by executors that can say what their tool
// does and what its args are, for front ends that show tools to an agent
// (the MCP gateway, events.ToolCatalog). An executor that is not a
// Describer is listed with its name alone and an object schema.
type Describer interface {
	Describe() Description
}

// Description is what a Describer says about its tool.
type Description struct {
	// Text says what a call does, in a sentence or two, for a person or
	// a model.
	Text string
	// InputSchema is the JSON Schema of the args: an object schema.
	InputSchema json.RawMessage
	// Upstream names the MCP server the tool calls, for a proxied tool.
	Upstream string
}

// Preparer is implemented by executors that can say, before their side
// effect, what it will be, in a form any process can check the workspace
// against (digests, never args). After the claim and before the started
// event the runner calls Prepare; what it returns is stored in the started
// event (at most events.MaxEvidenceBytes), handed to Execute as
// Call.Evidence and to a recovery in any process as Lost.Evidence. An
// error fails the op before anything ran, like Execute's before its
// effect.
type Preparer interface {
	Prepare(ctx context.Context, c Call) (json.RawMessage, error)
}

// Keeper is a Forgetter that can list the ops it keeps records of, so
// that records of ops another instance ended can go too.
type Keeper interface {
	Forgetter
	// Kept lists the op ids with records.
	Kept(ctx context.Context) ([]string, error)
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
