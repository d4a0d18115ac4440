package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/consumers/executor/conformance"
	"github.com/airlock-dev/airlock/consumers/tools/mcp"
	"github.com/airlock-dev/airlock/events"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// example is cmd/airlock-mcp-example, built for this test run.
var example string

// obj is args of any tool.
var obj = json.RawMessage(`{"line":"x"}`)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "airlock-mcp-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	example = filepath.Join(dir, "airlock-mcp-example")
	build := exec.Command("go", "build", "-o", example, "../../../cmd/airlock-mcp-example")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build airlock-mcp-example:", err)
		os.Exit(1)
	}
	// For the package's internal tests, which cannot see this variable.
	os.Setenv("AIRLOCK_MCP_EXAMPLE", example)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// upstream is the example server behind an Upstream, over stdio.
type upstream struct {
	u                 *mcp.Upstream
	tools             map[string]executor.Executor
	out, calls, descr string
}

func newUpstream(t *testing.T, rules ...mcp.Rule) *upstream {
	t.Helper()
	dir := t.TempDir()
	g := &upstream{out: filepath.Join(dir, "out.log"), calls: filepath.Join(dir, "calls.log"), descr: filepath.Join(dir, "description")}
	require.NoError(t, os.WriteFile(g.descr, []byte("first description"), 0o644))
	u, err := mcp.New(mcp.UpstreamConfig{
		Name: "ex", Command: []string{example, "--out", g.out, "--calls", g.calls, "--description-file", g.descr},
		Timeout: 3 * time.Second, Rules: rules, LedgerDir: filepath.Join(dir, "ledger"), Dir: dir,
		Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = u.Close() })
	g.u = u
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	execs, err := u.Executors(ctx)
	require.NoError(t, err)
	g.tools = map[string]executor.Executor{}
	for _, ex := range execs {
		g.tools[ex.Tool()] = ex
	}
	return g
}

func (g *upstream) lines(t *testing.T, line string) int {
	t.Helper()
	b, err := os.ReadFile(g.out)
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	n := 0
	for l := range strings.SplitSeq(string(b), "\n") {
		if l == line {
			n++
		}
	}
	return n
}

func TestToolsAndClasses(t *testing.T) {
	g := newUpstream(t, mcp.Rule{Match: "peek", Class: events.ClassRead}, mcp.Rule{Match: "*", Class: events.ClassRead})
	require.Len(t, g.tools, 4)
	// Configured read; the annotations admit to more and raise it.
	assert.Equal(t, events.ClassRead, g.tools["ex__peek"].Class())
	assert.Equal(t, events.ClassWrite, g.tools["ex__append"].Class(), "readOnlyHint false raises read to write")
	assert.Equal(t, events.ClassDestructive, g.tools["ex__garbage"].Class(), "destructiveHint true raises to destructive")
	d := g.tools["ex__append"].(executor.Describer).Describe()
	assert.Contains(t, d.Text, "first description")
	assert.Equal(t, "ex", d.Upstream)
	assert.Contains(t, string(d.InputSchema), `"line"`)

	// No rule: destructive.
	h := newUpstream(t)
	assert.Equal(t, events.ClassDestructive, h.tools["ex__peek"].Class())
}

func TestCallsOnceAndRecovers(t *testing.T) {
	g := newUpstream(t)
	ctx := context.Background()
	ex := g.tools["ex__append"]
	c := executor.Call{OpID: conformance.OpID(), Workspace: "w", Agent: "a", Tool: ex.Tool(), Attempt: "A1", Args: json.RawMessage(`{"line":"once"}`)}
	res, err := ex.Execute(ctx, c)
	require.NoError(t, err)
	var r mcp.Result
	require.NoError(t, json.Unmarshal(res, &r))
	assert.JSONEq(t, `{"lines":1}`, string(r.StructuredContent))
	assert.Equal(t, 1, g.lines(t, "once"))

	// The same attempt again is refused, never sent.
	_, err = ex.Execute(ctx, c)
	assert.ErrorIs(t, err, events.ErrAmbiguous)
	assert.Equal(t, 1, g.lines(t, "once"))

	// Recovery of the answered attempt: Done with its recorded result.
	rec, err := ex.Recover(ctx, executor.Call{OpID: c.OpID, Attempt: "A2", Args: c.Args}, executor.Lost{Attempt: "A1", Own: true})
	require.NoError(t, err)
	assert.Equal(t, executor.Done, rec.Action)
	assert.JSONEq(t, string(res), string(rec.Result))
	// Of an attempt with no record: rerun when it was this instance's,
	// defer when another's.
	rec, err = ex.Recover(ctx, executor.Call{OpID: c.OpID, Attempt: "A3"}, executor.Lost{Attempt: "A9", Own: true})
	require.NoError(t, err)
	assert.Equal(t, executor.Rerun, rec.Action)
	rec, err = ex.Recover(ctx, executor.Call{OpID: c.OpID, Attempt: "A3"}, executor.Lost{Attempt: "A9"})
	require.NoError(t, err)
	assert.Equal(t, executor.Defer, rec.Action)

	// Args that are no object are refused before anything is sent.
	_, err = ex.Execute(ctx, executor.Call{OpID: conformance.OpID(), Attempt: "A1", Args: json.RawMessage(`[1]`)})
	assert.ErrorIs(t, err, events.ErrInvalidArgs)
}

// A call sent and not answered (the upstream died during it) is
// ambiguous, and its recovery says so.
func TestUnansweredIsAmbiguous(t *testing.T) {
	g := newUpstream(t)
	ex := g.tools["ex__garbage"]
	c := executor.Call{OpID: conformance.OpID(), Attempt: "A1", Args: json.RawMessage(`{}`)}
	_, err := ex.Execute(context.Background(), c)
	require.ErrorIs(t, err, events.ErrAmbiguous)
	assert.Contains(t, err.Error(), "never sent again")
	rec, err := ex.Recover(context.Background(), executor.Call{OpID: c.OpID, Attempt: "A2"}, executor.Lost{Attempt: "A1", Own: true})
	require.NoError(t, err)
	assert.Equal(t, executor.Ambiguous, rec.Action)
	// The next call starts the upstream again.
	_, err = g.tools["ex__peek"].Execute(context.Background(), executor.Call{OpID: conformance.OpID(), Attempt: "A1", Args: json.RawMessage(`{}`)})
	require.NoError(t, err)
}

// The definition is an operand: it changes when the upstream's tool
// changes, live (tools/list_changed) or across a restart.
func TestDefinitionIsAnOperand(t *testing.T) {
	g := newUpstream(t)
	ex := g.tools["ex__append"].(*mcp.Tool)
	ctx := context.Background()
	first, err := ex.Operands(ctx, "w", obj)
	require.NoError(t, err)
	require.Len(t, first, 1)
	require.Contains(t, first, "mcp:ex/append")
	decided, err := ex.DecisionOperands(ctx, "w", obj)
	require.NoError(t, err)
	assert.Equal(t, first, decided)

	require.NoError(t, os.WriteFile(g.descr, []byte("second description"), 0o644))
	require.Eventually(t, func() bool {
		now, err := ex.Operands(ctx, "w", obj)
		return err == nil && now["mcp:ex/append"] != first["mcp:ex/append"]
	}, 10*time.Second, 50*time.Millisecond, "the runner's check sees the new definition")
	// The decision's cache is stale once the upstream said its tools
	// changed.
	require.Eventually(t, func() bool {
		now, err := ex.DecisionOperands(ctx, "w", obj)
		return err == nil && now["mcp:ex/append"] != first["mcp:ex/append"]
	}, 10*time.Second, 50*time.Millisecond)
}

// An upstream that cannot be reached: the tool's operands, and so the
// call, fail with REMOTE_UNAVAILABLE and nothing is sent; a dead session
// is replaced before an old listing could stand for the definition.
func TestUnreachableFailsClosed(t *testing.T) {
	g := newUpstream(t)
	ex := g.tools["ex__append"].(*mcp.Tool)
	ctx := context.Background()
	before, err := ex.Operands(ctx, "w", obj)
	require.NoError(t, err)
	// The program cannot start again: its description file is gone.
	require.NoError(t, os.Remove(g.descr))
	_, err = g.tools["ex__garbage"].Execute(ctx, executor.Call{OpID: conformance.OpID(), Attempt: "A1", Args: json.RawMessage(`{}`)})
	require.ErrorIs(t, err, events.ErrAmbiguous) // the program exited
	_, err = ex.Operands(ctx, "w", obj)
	require.ErrorIs(t, err, events.ErrRemoteUnavailable)
	start := time.Now()
	_, err = ex.Operands(ctx, "w", obj)
	require.ErrorIs(t, err, events.ErrRemoteUnavailable)
	assert.Less(t, time.Since(start), time.Second, "within RetryAfter, no second try")
	_, err = ex.Execute(ctx, executor.Call{OpID: conformance.OpID(), Attempt: "A1", Args: json.RawMessage(`{"line":"x"}`)})
	require.ErrorIs(t, err, events.ErrRemoteUnavailable)
	assert.Zero(t, g.lines(t, "x"))
	_ = before
}

// The conformance suite every executor passes: an upstream tool whose
// effect is a line appended.
func TestConformance(t *testing.T) {
	var n atomic.Int64
	conformance.Run(t, conformance.Harness{
		New: func(t *testing.T) conformance.Fixture {
			g := newUpstream(t, mcp.Rule{Match: "*", Class: events.ClassWrite})
			line := func(c executor.Call) string {
				var a struct{ Line string }
				_ = json.Unmarshal(c.Args, &a)
				return a.Line
			}
			return conformance.Fixture{
				Executor: g.tools["ex__slow_append"],
				Call: func(i int) executor.Call {
					return executor.Call{OpID: conformance.OpID(), Workspace: "w", Agent: "bot",
						Args: fmt.Appendf(nil, `{"delay_ms":0,"line":"c%d-%d"}`, i, n.Add(1))}
				},
				Slow: func(i int) executor.Call {
					return executor.Call{OpID: conformance.OpID(), Workspace: "w", Agent: "bot",
						Args: fmt.Appendf(nil, `{"delay_ms":600000,"line":"s%d-%d"}`, i, n.Add(1))}
				},
				Effects: func(c executor.Call) int {
					b, err := os.ReadFile(g.out)
					if err != nil {
						return 0
					}
					n := 0
					for l := range strings.SplitSeq(string(b), "\n") {
						if l == line(c) {
							n++
						}
					}
					return n
				},
			}
		},
		Repeat: conformance.RepeatRuns,
		Bad: []conformance.Bad{
			{Name: "args not an object", Call: conformance.Args(`["line"]`), Code: events.CodeInvalidArgs},
		},
	})
}
