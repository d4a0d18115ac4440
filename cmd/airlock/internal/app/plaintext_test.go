package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/consumers/tools/remote"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/ledger"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/producers"
	"github.com/cockroachdb/pebble/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// markers plants one unique string per case in args, and so in outputs of
// tools that return their args.
type markers map[string]string

func (m markers) new(name string) string {
	v := "MARK" + nuid.Next() + "-" + name
	m[name] = v
	return v
}

// find lists the markers data holds, by case.
func (m markers) find(data []byte) []string {
	var found []string
	for name, v := range m {
		if bytes.Contains(data, []byte(v)) {
			found = append(found, name)
		}
	}
	return found
}

// markerTool is a remote tool server: it fails a call whose args ask for
// it, with a message quoting them (as a tool's output may), and otherwise
// answers with the args. Its status answer is "unknown".
func markerTool(t *testing.T, nc *nats.Conn, subject string) {
	t.Helper()
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		var req remote.Request
		if err := json.Unmarshal(m.Data, &req); err != nil {
			return
		}
		rep := remote.Reply{V: remote.Version, Result: json.RawMessage(`{"echo":` + string(req.Args) + `}`)}
		if bytes.Contains(req.Args, []byte(`"fail"`)) {
			rep = remote.Reply{V: remote.Version, Error: &remote.Error{Code: "UPSTREAM_REFUSED", Message: "upstream refused " + string(req.Args)}}
		}
		b, _ := json.Marshal(rep)
		_ = m.Respond(b)
	})
	require.NoError(t, err)
	status, err := nc.Subscribe(subject+remote.StatusSuffix, func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"v":1,"state":"unknown"}`))
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	t.Cleanup(func() { _ = sub.Unsubscribe(); _ = status.Unsubscribe() })
}

// silentTool takes calls and never answers them, and says "unknown" when
// asked.
func silentTool(t *testing.T, nc *nats.Conn, subject string) {
	t.Helper()
	calls, err := nc.Subscribe(subject, func(*nats.Msg) {})
	require.NoError(t, err)
	status, err := nc.Subscribe(subject+remote.StatusSuffix, func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"v":1,"state":"unknown"}`))
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	t.Cleanup(func() { _ = calls.Unsubscribe(); _ = status.Unsubscribe() })
}

// TestNoPlaintextAtRest runs a mixed load whose args carry planted
// markers, through every way an op ends, and then looks for the markers
// in every stream message (body, headers, subject), every Pebble key and
// value, and every file under the data directory: nothing of a terminal
// op's args or output may be left. A held op's args stay readable.
func TestNoPlaintextAtRest(t *testing.T) {
	var offset atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	dir, root := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "kept.txt"), []byte("x\n"), 0o600))
	spec := confirmSpec()
	spec.HoldTTL = "1m"
	spec.Workspaces["auto"] = policy.WorkspaceSpec{Mode: "auto", Root: root}
	a, counter := holdsApp(t, app.Config{
		DataDir: dir, Policy: spec, Clock: clock,
		HoldExpiryInterval: 20 * time.Millisecond, ScrubInterval: 20 * time.Millisecond, ScrubSecureBacklog: -1,
		Streams: streams.Config{Duplicates: 200 * time.Millisecond},
		Tools: app.ToolsConfig{
			Remote:        map[string]string{"remote_echo": "tools.marker", "remote_silent": "tools.silent"},
			RemoteTimeout: 300 * time.Millisecond,
		},
	})
	svc := connectAs(t, a, authority.ServiceName)
	markerTool(t, svc, "tools.marker")
	silentTool(t, svc, "tools.silent")
	c := agentClient(t, a)
	ap := approverAs(t, a, "approver")
	m := markers{}
	var ops []string // every op that must end
	submit := func(ws, tool, args string, want events.State) producers.Outcome {
		t.Helper()
		out, err := c.Submit(ctxT(t), events.Request{Workspace: ws, Agent: "agent", Tool: tool, Args: json.RawMessage(args)})
		require.NoError(t, err)
		require.Equal(t, want, out.State, "%s %s: %+v", tool, args, out)
		ops = append(ops, out.OpID)
		return out
	}

	// Completed: echo, exec and a remote tool all return their args; the
	// reply carries the output, nothing else does.
	out := submit("auto", "echo", fmt.Sprintf(`{"m":%q}`, m.new("echo")), events.StateCompleted)
	assert.Contains(t, string(out.Result), m["echo"], "the reply carries the output")
	out = submit("auto", "exec", fmt.Sprintf(`{"argv":["/bin/sh","-c","printf %%s %s"]}`, m.new("exec")), events.StateCompleted)
	assert.Contains(t, string(out.Result), m["exec"])
	out = submit("auto", "remote_echo", fmt.Sprintf(`{"m":%q}`, m.new("remote")), events.StateCompleted)
	assert.Contains(t, string(out.Result), m["remote"])

	// Denied by policy, and denied at the decision for args a tool refuses
	// (a field name is a marker).
	submit("auto", "format_disk", fmt.Sprintf(`{"m":%q}`, m.new("policy")), events.StateDenied)
	out = submit("auto", "exec", fmt.Sprintf(`{"argv":["/bin/true"],%q:1}`, m.new("badargs")), events.StateDenied)
	assert.Equal(t, events.CodeInvalidArgs, out.Code)

	// Failed: a program that does not exist, a remote tool's error quoting
	// the args, a patch that conflicts on a marked path.
	out = submit("auto", "exec", fmt.Sprintf(`{"argv":["/nonexistent/%s"]}`, m.new("nosuchprogram")), events.StateFailed)
	assert.Equal(t, events.CodeExecutorFailed, out.Code)
	out = submit("auto", "remote_echo", fmt.Sprintf(`{"fail":%q}`, m.new("remotefail")), events.StateFailed)
	assert.Contains(t, out.Message, "UPSTREAM_REFUSED")
	p := m.new("patch")
	out = submit("auto", "apply_patch", fmt.Sprintf(`{"patch":%q}`, "--- a/"+p+".txt\n+++ b/"+p+".txt\n@@ -1 +1 @@\n-x\n+y\n"), events.StateFailed)
	assert.Equal(t, events.CodePatchConflict, out.Code)

	// Ambiguous: a remote call that is never answered, status unknown.
	out = submit("auto", "remote_silent", fmt.Sprintf(`{"m":%q}`, m.new("ambiguous")), events.StateAmbiguous)
	assert.Equal(t, events.CodeAmbiguous, out.Code)

	// Held, then granted and run; held then denied; held then expired.
	granted := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(fmt.Sprintf(`{"m":%q}`, m.new("granted")))})
	denied := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(fmt.Sprintf(`{"m":%q}`, m.new("holddenied")))})
	expired := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(fmt.Sprintf(`{"m":%q}`, m.new("expired")))})
	ops = append(ops, granted.OpID, denied.OpID, expired.OpID)
	for _, h := range []producers.Outcome{granted, denied, expired} {
		waitHeldInProjection(t, a, h.OpID)
	}
	_, err := ap.Grant(ctxT(t), granted.HoldID, granted.ArgsDigest, "fine")
	require.NoError(t, err)
	_, err = ap.Deny(ctxT(t), denied.HoldID, denied.ArgsDigest, "no")
	require.NoError(t, err)
	assert.Equal(t, events.StateCompleted, waitTerminal(t, a, granted.OpID).State)
	assert.Equal(t, events.StateDenied, waitTerminal(t, a, denied.OpID).State)
	offset.Store(int64(2 * time.Minute)) // past the third hold's expiry
	assert.Equal(t, events.StateExpired, waitTerminal(t, a, expired.OpID).State)

	// A hold that stays pending: its args stay, for the approver and the
	// run to come.
	kept := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(fmt.Sprintf(`{"m":%q}`, m.new("kept")))})
	waitHeldInProjection(t, a, kept.OpID)

	// Rejected: a body naming another workspace than its subject, and args
	// with a duplicate (marked) key.
	js, err := jetstream.New(connectAs(t, a, "agent"))
	require.NoError(t, err)
	rejectedBodies := []string{
		fmt.Sprintf(`{"workspace":"elsewhere","agent":"agent","tool":"echo","args":{"m":%q}}`, m.new("mismatch")),
		fmt.Sprintf(`{"workspace":"auto","agent":"agent","tool":"echo","args":{%q:1,%q:2}}`, m.new("dupkey"), m["dupkey"]),
	}
	for _, body := range rejectedBodies {
		ev, err := events.NewEventRaw(events.TypeRequested, "test", "", nuid.Next(), []byte(body))
		require.NoError(t, err)
		_, err = js.PublishMsg(ctxT(t), events.Encode(events.RequestSubject("auto", "agent"), ev))
		require.NoError(t, err)
	}

	// A retry after the dedupe window: a second stored copy of the args.
	retry := events.Request{Workspace: "auto", Agent: "agent", Tool: "echo", Args: json.RawMessage(fmt.Sprintf(`{"m":%q}`, m.new("retry")))}
	first, err := c.Submit(ctxT(t), retry)
	require.NoError(t, err)
	time.Sleep(400 * time.Millisecond) // the window passes
	second, err := c.Submit(ctxT(t), retry)
	require.NoError(t, err)
	require.Equal(t, first.OpID, second.OpID)
	assert.Nil(t, second.Result, "the result is not kept")
	assert.Equal(t, first.ResultDigest, second.ResultDigest)
	ops = append(ops, first.OpID)

	// Everything settles: every op ended and its request erased, every
	// request message handled by the gate.
	for _, id := range ops {
		require.True(t, waitTerminal(t, a, id).State.Terminal())
	}
	ctx := ctxT(t)
	waitScrubbed(t, a, 20*time.Second)

	// The held op's args are still there and readable.
	keptOp, err := a.Store.Op(kept.OpID)
	require.NoError(t, err)
	args, digest, err := ap.Args(ctx, keptOp)
	require.NoError(t, err)
	assert.Contains(t, string(args), m["kept"])
	assert.Equal(t, keptOp.ArgsDigest, digest)

	// Every message of both streams, read back: only the held op's request
	// holds a marker, its own.
	for _, name := range []string{streams.Requests, streams.Ops, streams.Held} {
		st, err := a.JetStream.Stream(ctx, name)
		require.NoError(t, err)
		last := st.CachedInfo().State.LastSeq
		for seq := uint64(1); seq <= last; seq++ {
			raw, err := st.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			require.NoError(t, err)
			var all bytes.Buffer
			all.WriteString(raw.Subject)
			for k, vs := range raw.Header {
				all.WriteString(k + ":" + strings.Join(vs, ",") + "\n")
			}
			all.Write(raw.Data)
			found := m.find(all.Bytes())
			if name == streams.Held && raw.Subject == events.HeldSubject(keptOp.ID) {
				assert.Equal(t, []string{"kept"}, found, "the pending hold's request, moved out of %s", streams.Requests)
				continue
			}
			assert.Empty(t, found, "%s message %d (%s) holds plaintext", name, seq, raw.Subject)
		}
	}

	// Stop, then read the projection key by key, and every file on disk.
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, a.Shutdown(sctx))
	db, err := pebble.Open(filepath.Join(dir, app.StoreDir), &pebble.Options{ReadOnly: true})
	require.NoError(t, err)
	it, err := db.NewIter(nil)
	require.NoError(t, err)
	keys := 0
	for ok := it.First(); ok; ok = it.Next() {
		keys++
		assert.Empty(t, m.find(it.Key()), "Pebble key %q", it.Key())
		assert.Empty(t, m.find(it.Value()), "Pebble value of %q", it.Key())
	}
	require.NoError(t, it.Close())
	require.NoError(t, db.Close())
	assert.Positive(t, keys)

	heldDir := filepath.Join("streams", streams.Held) + string(filepath.Separator)
	eachFile(t, dir, func(path string, b []byte) {
		found := m.find(b)
		if len(found) == 1 && found[0] == "kept" && strings.Contains(path, heldDir) {
			return // the pending hold's request
		}
		assert.Empty(t, found, "file %s holds plaintext", path)
	})

	// The reply carried each completed op's output; the events kept its
	// digest, and the executors' ledgers are gone.
	left, err := ledger.ReadKept(filepath.Join(dir, "ledger", "exec"))
	require.NoError(t, err)
	assert.Empty(t, left)
}

// waitScrubbed waits until the gate has handled every request message and
// the scrub index is empty: every ended op's request erased.
func waitScrubbed(t *testing.T, a *app.App, within time.Duration) {
	t.Helper()
	ctx := ctxT(t)
	gateCons, err := a.JetStream.Consumer(ctx, streams.Requests, streams.GateConsumer)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := gateCons.Info(ctx)
		if err != nil || info.NumAckPending != 0 || info.NumPending != 0 {
			return false
		}
		pending, err := a.Store.PendingScrubs(nil, 10)
		return err == nil && len(pending) == 0
	}, within, 20*time.Millisecond)
}

// eachFile calls fn with every file under dir and its bytes; there must
// be some.
func eachFile(t *testing.T, dir string, fn func(path string, b []byte)) {
	t.Helper()
	files := 0
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files++
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fn(path, b)
		return nil
	}))
	assert.Positive(t, files)
}
