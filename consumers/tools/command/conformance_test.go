package command_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/consumers/executor/conformance"
	"github.com/airlock-dev/airlock/consumers/tools/command"
	"github.com/airlock-dev/airlock/events"
)

// Workspaces of the conformance fixture: confWS has a root, goneWS a root
// that does not exist.
const (
	confWS = "w"
	goneWS = "gone"
)

// exec's effect is a line appended to <root>/<op id>.mark by the call's
// own shell script. A new attempt of a completed op runs again (exec
// relies on the runner and its ledger-based Recover, never on the op id).
// A cancelled call is killed and its result recorded, so Recover answers
// Done with a result that says SIGKILL.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Harness{
		New:         newConformanceFixture,
		Repeat:      conformance.RepeatRuns,
		Interrupted: requireKilled,
		Bad:         execBad(),
		Limits:      execLimits(),
	})
}

func newConformanceFixture(t *testing.T) conformance.Fixture {
	root := t.TempDir()
	e, err := command.New(command.Config{
		LedgerDir: t.TempDir(),
		Root: func(ws string) string {
			switch ws {
			case confWS:
				return root
			case goneWS:
				return filepath.Join(root, "missing")
			}
			return ""
		},
	})
	require.NoError(t, err)
	script := func(op, then string) executor.Call {
		return executor.Call{OpID: op, Workspace: confWS, Agent: "bot",
			Args: canonJSON(argv("sh", "-c", "echo ran >> "+op+".mark; "+then))}
	}
	return conformance.Fixture{
		Executor: e,
		Call: func(i int) executor.Call {
			return script(conformance.OpID(), fmt.Sprintf("echo call %d", i))
		},
		Slow: func(int) executor.Call {
			return script(conformance.OpID(), "exec sleep 30")
		},
		Effects: func(c executor.Call) int {
			b, err := os.ReadFile(filepath.Join(root, c.OpID+".mark"))
			if errors.Is(err, fs.ErrNotExist) {
				return 0
			}
			require.NoError(t, err)
			return bytes.Count(b, []byte("ran\n"))
		},
	}
}

// requireKilled checks a cancelled call's recorded result says the
// process group was killed, not that the script finished.
func requireKilled(t *testing.T, raw json.RawMessage) {
	var r command.Result
	require.NoError(t, json.Unmarshal(raw, &r))
	assert.Equal(t, -1, r.ExitCode)
	assert.Equal(t, "SIGKILL", r.Signal)
	assert.False(t, r.TimedOut, "cancelled, not timed out")
}

// validArgv is the argv of a fixture call.
func validArgv(c executor.Call) []string {
	var a command.Args
	if err := json.Unmarshal(c.Args, &a); err != nil {
		panic(err)
	}
	return a.Argv
}

// withArgs replaces a call's args by what args builds from its argv. The
// bad calls keep the marker script where they can, so a call that ran
// despite its refusal would show.
func withArgs(args func(argv []string) any) func(executor.Call) executor.Call {
	return func(c executor.Call) executor.Call {
		c.Args = canonJSON(args(validArgv(c)))
		return c
	}
}

// canonJSON is the canonical JSON of v, as the runner hands args over
// (json.Marshal would escape the script's >> as \u003e).
func canonJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err == nil {
		b, err = events.Canonical(b)
	}
	if err != nil {
		panic(err)
	}
	return b
}

// withScript appends shell text to the fixture call's script.
func withScript(tail string) func(executor.Call) executor.Call {
	return withArgs(func(a []string) any {
		a[2] += tail
		return argv(a...)
	})
}

func execBad() []conformance.Bad {
	tooMany := make([]string, command.MaxArgv+1)
	for i := range tooMany {
		tooMany[i] = "x"
	}
	field := func(name string, value any) func(executor.Call) executor.Call {
		return withArgs(func(a []string) any { return map[string]any{"argv": a, name: value} })
	}
	return []conformance.Bad{
		{Name: "sudo after &&", Call: withScript(" && sudo true"), Code: events.CodePrivilegeEscalation},
		{Name: "doas in $()", Call: withScript("; echo $(doas id)"), Code: events.CodePrivilegeEscalation},
		{Name: "su as an argument", Call: withArgs(func(a []string) any { return argv(append(a, "su")...) }), Code: events.CodePrivilegeEscalation},
		{Name: "absolute sudo as argv[0]", Call: withArgs(func(a []string) any { return argv(append([]string{"/usr/bin/sudo"}, a...)...) }), Code: events.CodePrivilegeEscalation},
		{Name: "NUL byte in argv", Call: withArgs(func(a []string) any { return argv(append(a, "a\x00b")...) }), Code: events.CodeInvalidArgs},
		{Name: "argv entry a number", Call: conformance.Args(`{"argv":["sh",1]}`), Code: events.CodeInvalidArgs},
		{Name: "argv entry null", Call: conformance.Args(`{"argv":["sh",null]}`), Code: events.CodeInvalidArgs},
		{Name: "argv a string", Call: conformance.Args(`{"argv":"sh -c true"}`), Code: events.CodeInvalidArgs},
		{Name: "empty argv", Call: conformance.Args(`{"argv":[]}`), Code: events.CodeInvalidArgs},
		{Name: "empty argv[0]", Call: conformance.Args(`{"argv":["","x"]}`), Code: events.CodeInvalidArgs},
		{Name: "no argv", Call: conformance.Args(`{"timeout_ms":100}`), Code: events.CodeInvalidArgs},
		{Name: "args an array", Call: conformance.Args(`["sh","-c","true"]`), Code: events.CodeInvalidArgs},
		{Name: "unknown field", Call: field("shell", true), Code: events.CodeInvalidArgs},
		{Name: "null timeout", Call: field("timeout_ms", nil), Code: events.CodeInvalidArgs},
		{Name: "fractional timeout", Call: field("timeout_ms", 1.5), Code: events.CodeInvalidArgs},
		{Name: "zero timeout", Call: field("timeout_ms", 0), Code: events.CodeInvalidArgs},
		{Name: "timeout over MaxTimeout", Call: field("timeout_ms", command.DefaultMaxTimeout.Milliseconds()+1), Code: events.CodeInvalidArgs},
		{Name: "too many argv entries", Call: withArgs(func([]string) any { return argv(tooMany...) }), Code: events.CodeInvalidArgs},
		{Name: "argv over MaxArgvBytes", Call: withScript("; : " + strings.Repeat("x", command.MaxArgvBytes)), Code: events.CodeInvalidArgs},
		{Name: "program not found", Call: withArgs(func(a []string) any { return argv(append([]string{"/nonexistent/airlock-conformance"}, a...)...) }), Code: events.CodeExecutorFailed},
		{Name: "workspace root missing", Call: func(c executor.Call) executor.Call { c.Workspace = goneWS; return c }, Code: events.CodeNoWorkspaceRoot},
	}
}

func execLimits() []conformance.Limit {
	result := func(t *testing.T, raw json.RawMessage, err error) command.Result {
		t.Helper()
		require.NoError(t, err)
		var r command.Result
		require.NoError(t, json.Unmarshal(raw, &r))
		return r
	}
	truncated := func(t *testing.T, raw json.RawMessage, err error) {
		r := result(t, raw, err)
		assert.Equal(t, 0, r.ExitCode)
		assert.True(t, r.StdoutTruncated, "stdout_truncated")
		assert.True(t, r.StderrTruncated, "stderr_truncated")
	}
	return []conformance.Limit{
		{
			Name:  "text output over the result cap",
			Call:  withScript("; head -c 1500000 /dev/zero | tr '\\0' a; head -c 1500000 /dev/zero | tr '\\0' b >&2"),
			Check: truncated,
		},
		{
			// Not UTF-8: kept as base64, a third larger.
			Name:  "binary output over the result cap",
			Call:  withScript("; head -c 1500000 /dev/zero | tr '\\0' '\\377'; head -c 1500000 /dev/zero | tr '\\0' '\\377' >&2"),
			Check: truncated,
		},
		{
			// Valid UTF-8 that JSON escapes six bytes a byte (\u0000).
			Name:  "NUL output over the result cap",
			Call:  withScript("; head -c 1500000 /dev/zero; head -c 1500000 /dev/zero >&2"),
			Check: truncated,
		},
		{
			Name: "timeout",
			Call: withArgs(func(a []string) any {
				a[2] += "; exec sleep 30"
				return map[string]any{"argv": a, "timeout_ms": 200}
			}),
			Check: func(t *testing.T, raw json.RawMessage, err error) {
				r := result(t, raw, err)
				assert.True(t, r.TimedOut, "timed_out")
				assert.Equal(t, "SIGKILL", r.Signal)
			},
		},
	}
}
