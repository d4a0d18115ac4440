package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/consumers/tools/remote"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const subject = "tools.append"

// rig is an embedded NATS server, the example server's files in a
// temporary directory, and a Remote talking to it.
type rig struct {
	n          *testenv.NATS
	state, out string
	r          *remote.Remote
	stop       func()
}

func newRig(t *testing.T) *rig {
	t.Helper()
	n := testenv.StartNATS(t, streams.Config{})
	dir := t.TempDir()
	r, err := remote.New(remote.Config{Conn: n.Conn, Tool: "append", Subject: subject, Timeout: 5 * time.Second, StatusTimeout: 5 * time.Second})
	require.NoError(t, err)
	g := &rig{n: n, state: filepath.Join(dir, "state.json"), out: filepath.Join(dir, "out.log"), r: r}
	t.Cleanup(func() { g.stop() })
	return g
}

// start runs the example server on its own connection until stop.
func (g *rig) start(t *testing.T) {
	t.Helper()
	nc, err := nats.Connect(g.n.Server.ClientURL())
	require.NoError(t, err)
	s, err := open(g.state, g.out, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	l, err := s.listen(nc, subject)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.run(ctx) }()
	g.stop = func() {
		cancel()
		assert.NoError(t, <-done)
		nc.Close()
		g.stop = func() {}
	}
}

func call(op, attempt, args string) executor.Call {
	return executor.Call{OpID: op, Attempt: attempt, Workspace: "w", Agent: "a", Tool: "append", Args: json.RawMessage(args)}
}

func (g *rig) lines(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(g.out)
	require.NoError(t, err)
	return string(data)
}

// A second call for an op, another attempt or after a restart, gets the
// first result and appends nothing.
func TestOncePerOp(t *testing.T) {
	g := newRig(t)
	g.start(t)
	ctx := context.Background()
	res, err := g.r.Execute(ctx, call("op1", "A1", `{"line":"first"}`))
	require.NoError(t, err)
	assert.JSONEq(t, `{"lines":1}`, string(res))

	res, err = g.r.Execute(ctx, call("op1", "A2", `{"line":"first"}`))
	require.NoError(t, err)
	assert.JSONEq(t, `{"lines":1}`, string(res))

	res, err = g.r.Execute(ctx, call("op2", "B1", `{"line":"second"}`))
	require.NoError(t, err)
	assert.JSONEq(t, `{"lines":2}`, string(res))
	assert.Equal(t, "first\nsecond\n", g.lines(t))

	g.stop()
	g.start(t)
	res, err = g.r.Execute(ctx, call("op1", "A3", `{"line":"first"}`))
	require.NoError(t, err)
	assert.JSONEq(t, `{"lines":1}`, string(res))
	rec, err := g.r.Recover(ctx, call("op2", "B2", `{}`), executor.Lost{Attempt: "B1", Own: true})
	require.NoError(t, err)
	assert.Equal(t, executor.Done, rec.Action)
	assert.JSONEq(t, `{"lines":2}`, string(rec.Result))
	assert.Equal(t, "first\nsecond\n", g.lines(t))
}

// Answering never fences the attempt asked about, durably: it is refused
// if it arrives later, and a new attempt runs.
func TestNeverFences(t *testing.T) {
	g := newRig(t)
	g.start(t)
	ctx := context.Background()
	rec, err := g.r.Recover(ctx, call("op1", "A2", `{"line":"x"}`), executor.Lost{Attempt: "A1", Own: true})
	require.NoError(t, err)
	assert.Equal(t, executor.Rerun, rec.Action)

	g.stop()
	g.start(t)
	_, err = g.r.Execute(ctx, call("op1", "A1", `{"line":"x"}`))
	assert.Equal(t, events.CodeExecutorFailed, events.CodeOf(err))
	assert.ErrorContains(t, err, "FENCED")
	assert.NoFileExists(t, g.out)

	res, err := g.r.Execute(ctx, call("op1", "A2", `{"line":"x"}`))
	require.NoError(t, err)
	assert.JSONEq(t, `{"lines":1}`, string(res))
	assert.Equal(t, "x\n", g.lines(t))
}

// A record left started by a crash: the server cannot tell whether the
// line was appended, and says so to calls and to status queries.
func TestCrashLeftStartedIsUnknown(t *testing.T) {
	g := newRig(t)
	require.NoError(t, os.WriteFile(g.state, []byte(`{"v":1,"ops":{"op1":{"state":"started","attempt":"A1"}}}`), 0o600))
	g.start(t)
	ctx := context.Background()
	rec, err := g.r.Recover(ctx, call("op1", "A2", `{"line":"x"}`), executor.Lost{Attempt: "A1", Own: true})
	require.NoError(t, err)
	assert.Equal(t, executor.Ambiguous, rec.Action)
	assert.Contains(t, rec.Known, "status: unknown")

	_, err = g.r.Execute(ctx, call("op1", "A2", `{"line":"x"}`))
	assert.Equal(t, events.CodeAmbiguous, events.CodeOf(err))
	// The server's message is not kept (the op's events store the error):
	// its code and the message's size are.
	assert.ErrorContains(t, err, "tools.append: a message of")
	assert.NoFileExists(t, g.out)
}

// Bad args fail with INVALID_ARGS and append nothing; the refusal is the
// op's recorded outcome too.
func TestBadArgs(t *testing.T) {
	g := newRig(t)
	g.start(t)
	ctx := context.Background()
	for i, args := range []string{`{}`, `{"line":7}`, `{"line":"a\nb"}`, `{"line":"a","more":1}`, `[]`} {
		op := "bad" + string(rune('0'+i))
		_, err := g.r.Execute(ctx, call(op, "A1", args))
		assert.Equal(t, events.CodeInvalidArgs, events.CodeOf(err), "%s: %v", args, err)
		_, err = g.r.Execute(ctx, call(op, "A2", `{"line":"fine"}`))
		assert.Equal(t, events.CodeInvalidArgs, events.CodeOf(err), "replayed: %v", err)
	}
	assert.NoFileExists(t, g.out)
}

// A call or query in a version the server does not speak is refused with
// a v1 error.
func TestOtherVersion(t *testing.T) {
	g := newRig(t)
	g.start(t)
	m, err := g.n.Conn.Request(subject, []byte(`{"v":2,"op_id":"op1","attempt":"A1","args":{"line":"x"}}`), 5*time.Second)
	require.NoError(t, err)
	rep, err := remote.DecodeReply(m.Data)
	require.NoError(t, err)
	require.NotNil(t, rep.Error)
	assert.Equal(t, "UNSUPPORTED_VERSION", rep.Error.Code)

	m, err = g.n.Conn.Request(subject+remote.StatusSuffix, []byte(`{"v":1,"op_id":"op1"}`), 5*time.Second)
	require.NoError(t, err)
	st, err := remote.DecodeStatusReply(m.Data)
	require.NoError(t, err)
	assert.Equal(t, remote.State(""), st.State)
	assert.Equal(t, "INVALID_REQUEST", st.Error.Code)
	assert.NoFileExists(t, g.out)
}
