package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/failpoint"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/airlock-dev/airlock/producers"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// toolsPolicy runs exec and apply_patch at once in workspace "crash",
// whose root is root.
func toolsPolicy(t *testing.T, root string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.yaml")
	body := fmt.Sprintf("tools: {exec: exec, apply_patch: write, echo: read, count: write, append: network}\n"+
		"default_mode: auto\nworkspaces:\n  crash: {mode: auto, root: %q}\n", root)
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

// toolCase is one op of a crash test: what to submit and how to tell how
// often its side effect happened.
type toolCase struct {
	tool string
	args string
	// effects counts the side effects that happened.
	effects func(t *testing.T) int
}

// execCase appends a line to a marker file each time it runs.
func execCase(t *testing.T, marker, extra string) toolCase {
	args, err := json.Marshal(map[string]any{"argv": []string{"/bin/sh", "-c", "echo run >> " + marker + extra}})
	require.NoError(t, err)
	return toolCase{tool: "exec", args: string(args), effects: func(t *testing.T) int {
		b, err := os.ReadFile(marker)
		if os.IsNotExist(err) {
			return 0
		}
		require.NoError(t, err)
		return strings.Count(string(b), "run\n")
	}}
}

// patchCase changes two files of root from "a" to "b"; effects is 1 when
// both are at their post-image, 0 when both are at their pre-image, and
// -1 when they disagree.
func patchCase(t *testing.T, root, name string) toolCase {
	files := []string{name + "-1.txt", name + "-2.txt"}
	var diff strings.Builder
	for _, f := range files {
		require.NoError(t, os.WriteFile(filepath.Join(root, f), []byte("a\n"), 0o644))
		fmt.Fprintf(&diff, "--- a/%s\n+++ b/%s\n@@ -1 +1 @@\n-a\n+b\n", f, f)
	}
	args, err := json.Marshal(map[string]string{"patch": diff.String()})
	require.NoError(t, err)
	return toolCase{tool: "apply_patch", args: string(args), effects: func(t *testing.T) int {
		post := 0
		for _, f := range files {
			b, err := os.ReadFile(filepath.Join(root, f))
			require.NoError(t, err)
			if string(b) == "b\n" {
				post++
			}
		}
		switch post {
		case len(files):
			return 1
		case 0:
			return 0
		}
		return -1
	}}
}

// remoteCase appends a line through the example tool server, which must
// run (startToolServer); effects counts the lines in its output file.
func remoteCase(out string) toolCase {
	return toolCase{tool: "append", args: `{"line":"x"}`, effects: func(t *testing.T) int {
		b, err := os.ReadFile(out)
		if os.IsNotExist(err) {
			return 0
		}
		require.NoError(t, err)
		return strings.Count(string(b), "\n")
	}}
}

// startToolServer runs the example tool server against srv, as Airlock's
// own principal, on subject tools.append, until the test ends; it
// reconnects across restarts of serve on the same address.
func startToolServer(t *testing.T, srv *server, out string) {
	t.Helper()
	state := filepath.Join(t.TempDir(), "state.json")
	cmd := exec.Command(toolServer, "--server", srv.url, "--creds", filepath.Join(srv.dir, "creds", "airlock.creds"),
		"--subject", "tools.append", "--state", state, "--out", out)
	var stderr testenv.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	nc := srv.connect(t, authority.ServiceName)
	require.Eventually(t, func() bool {
		_, err := nc.Request("tools.append.status", []byte(`{"v":1,"op_id":"op_00000000000000000000000000000000","attempt":"probe"}`), time.Second)
		return err == nil
	}, 20*time.Second, 100*time.Millisecond, "the tool server answers: %s", stderr.String())
}

func (c toolCase) opID(t *testing.T) string {
	t.Helper()
	req := events.Request{Workspace: "crash", Agent: "agent", Tool: c.tool, Args: json.RawMessage(c.args)}
	require.NoError(t, req.Validate())
	_, op := req.Identity()
	return op
}

// waitOpState waits until ops get shows the op terminal and returns it.
func waitOpState(t *testing.T, srv *server, opID string) *events.Op {
	t.Helper()
	c, err := producers.New(srv.connect(t, authority.ServiceName))
	require.NoError(t, err)
	defer c.Close()
	return waitOpWith(t, c, opID, nil)
}

// waitOpWith waits until the projection shows the op terminal; describe,
// when set, adds what the stream holds to a failure.
func waitOpWith(t *testing.T, c *producers.Client, opID string, describe func() string) *events.Op {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		op, err := c.Op(ctx, opID)
		cancel()
		if err == nil && op.State.Terminal() {
			return op
		}
		if time.Now().After(deadline) {
			more := ""
			if describe != nil {
				more = describe()
			}
			t.Fatalf("op %s never ended: %+v, %v %s", opID, op, err, more)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// terminals counts the op's terminal events in the stream: exactly one, or
// the state machine was broken.
func terminals(t *testing.T, srv *server, opID string) int {
	t.Helper()
	js, err := jetstream.New(srv.connect(t, authority.ServiceName))
	require.NoError(t, err)
	return terminalsIn(t, js, opID)
}

func terminalsIn(t *testing.T, js jetstream.JetStream, opID string) int {
	t.Helper()
	n := 0
	for _, typ := range testenv.OpEvents(t, js, "crash", opID) {
		switch typ {
		case events.TypeCompleted, events.TypeFailed, events.TypeAmbiguous, events.TypeDenied, events.TypeExpired:
			n++
		}
	}
	return n
}

// TestCrashToolsAtFailpoints kills serve at every failpoint of every tool,
// restarts it on the same data dir without the failpoint, and checks that
// the op ended once, its side effect happened at most once, and recovery
// said what it knew.
func TestCrashToolsAtFailpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess crash test")
	}
	type expect struct {
		state   events.State
		effects int
	}
	cases := []struct {
		name, tool, point string
		want              expect
	}{
		{"exec before start", "exec", failpoint.BeforeStart, expect{events.StateCompleted, 1}},          // never spawned: run
		{"exec after effect", "exec", failpoint.AfterEffect, expect{events.StateCompleted, 1}},          // exit recorded: done
		{"exec after result kept", "exec", failpoint.AfterResultKept, expect{events.StateCompleted, 1}}, // result stored, no event
		{"exec after result", "exec", failpoint.AfterResult, expect{events.StateCompleted, 1}},          // stored already
		{"exec record error", "exec", failpoint.RecordError, expect{events.StateCompleted, 1}},          // exit recorded: done
		{"patch before start", "apply_patch", failpoint.BeforeStart, expect{events.StateCompleted, 1}},
		{"patch between files", "apply_patch", failpoint.PatchBetweenFiles, expect{events.StateAmbiguous, -1}},
		{"patch after effect", "apply_patch", failpoint.AfterEffect, expect{events.StateCompleted, 1}},
		{"patch after result kept", "apply_patch", failpoint.AfterResultKept, expect{events.StateCompleted, 1}},
		{"patch after result", "apply_patch", failpoint.AfterResult, expect{events.StateCompleted, 1}},
		{"patch record error", "apply_patch", failpoint.RecordError, expect{events.StateCompleted, 1}},
		{"remote before start", "append", failpoint.BeforeStart, expect{events.StateCompleted, 1}}, // never started, so run
		{"remote after effect", "append", failpoint.AfterEffect, expect{events.StateCompleted, 1}}, // status: done
		{"remote after result kept", "append", failpoint.AfterResultKept, expect{events.StateCompleted, 1}},
		{"remote after result", "append", failpoint.AfterResult, expect{events.StateCompleted, 1}},
		{"remote record error", "append", failpoint.RecordError, expect{events.StateCompleted, 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, root, marks, addr := t.TempDir(), t.TempDir(), t.TempDir(), freePort(t)
			pol := toolsPolicy(t, root)
			c := execCase(t, filepath.Join(marks, "marker"), "")
			switch tc.tool {
			case "apply_patch":
				c = patchCase(t, root, "p")
			case "append":
				c = remoteCase(filepath.Join(marks, "append.log"))
			}
			arm := tc.point + ":" + tc.tool
			if tc.point == failpoint.RecordError {
				arm = tc.point + ":" + tc.tool + "=error"
			}
			remoteTool := []string{"--remote-tool", "append=tools.append"}
			srv := startServer(t, dir, addr, []string{failpoint.EnvVar + "=" + arm}, append([]string{"--policy", pol, "--claim-timeout", "1s"}, remoteTool...)...)
			if tc.tool == "append" {
				startToolServer(t, srv, filepath.Join(marks, "append.log"))
			}
			out, _, code := srv.run(t, "submit", "--ws", "crash", "--tool", c.tool, "--args", c.args, "--wait", "3s", "--json")
			switch tc.point {
			case failpoint.AfterResult:
			case failpoint.RecordError:
				// The attempt's result was never stored, so the attempt
				// told nobody anything; recovery, in the same process,
				// settles the op from the executor's ledger and only that
				// outcome may reach the caller.
				if code == 0 {
					assert.Contains(t, out, `"state":"completed"`)
				}
			default:
				assert.NotEqual(t, 0, code, "no result is stored, so the caller is not told of success: %s", out)
			}
			if tc.point == failpoint.RecordError {
				srv.kill() // the error point leaves the process running; stop it
			} else {
				select {
				case <-srv.done:
				case <-time.After(20 * time.Second):
					t.Fatalf("serve did not die at %s: %s", arm, srv.stderr.String())
				}
			}
			srv = startServer(t, dir, addr, nil, append([]string{"--policy", pol, "--claim-timeout", "1s"}, remoteTool...)...)
			op := waitOpState(t, srv, c.opID(t))
			if tc.tool == "append" && tc.point == failpoint.BeforeStart && op.State == events.StateFailed {
				// The attempt never started, so the restarted serve runs the
				// call at once; the tool server may not have reconnected
				// yet, and then nothing received the call.
				assert.Equal(t, events.CodeRemoteUnavailable, op.ErrorCode, op.Error)
				tc.want = expect{events.StateFailed, 0}
			}
			assert.Equal(t, tc.want.state, op.State, "%s %s", op.ErrorCode, op.Error)
			assert.Equal(t, tc.want.effects, c.effects(t), "side effects")
			assert.Equal(t, 1, terminals(t, srv, op.ID), "exactly one terminal event")
			if op.State == events.StateCompleted {
				// The result counted is the completed event's, whichever
				// attempt stored one before the crash: the agent gets it,
				// checked against the event's digest.
				out, errOut, code := srv.run(t, "ops", "result", op.ID, "--json")
				assert.Equal(t, 0, code, out+errOut)
				assert.Contains(t, out, op.ResultDigest)
			}
			if tc.point == failpoint.RecordError {
				// The attempt started and took effect; recovery stores
				// its outcome from the executor's records, under no
				// second claim.
				assert.Equal(t, 1, op.Attempts, "the lost attempt's own outcome")
			}
			if op.State == events.StateAmbiguous {
				assert.Equal(t, events.CodeAmbiguous, op.ErrorCode)
				// Files by their place in the patch: the paths are args,
				// which the op's events never hold.
				assert.Contains(t, op.Error, "file 1 of 2 holds its post-image", "says which files are where")
				assert.NotContains(t, op.Error, "p-1.txt")
			}
		})
	}
}

// TestCrashDuringExec kills serve while an exec runs: after the restart the
// op is ambiguous, says what is known, and the command never runs again.
func TestCrashDuringExec(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess crash test")
	}
	dir, root, marks, addr := t.TempDir(), t.TempDir(), t.TempDir(), freePort(t)
	pol := toolsPolicy(t, root)
	marker := filepath.Join(marks, "marker")
	c := execCase(t, marker, "; sleep 30")
	srv := startServer(t, dir, addr, nil, "--policy", pol, "--claim-timeout", "1s")
	submit := exec.Command(binary, "submit", "--ws", "crash", "--tool", "exec", "--args", c.args, "--wait", "5s", "--server="+srv.url, "--data="+srv.dir)
	require.NoError(t, submit.Start())
	defer func() { _ = submit.Wait() }()
	require.Eventually(t, func() bool { return c.effects(t) == 1 }, 20*time.Second, 20*time.Millisecond, "the command started")
	srv.kill()

	srv = startServer(t, dir, addr, nil, "--policy", pol, "--claim-timeout", "1s")
	op := waitOpState(t, srv, c.opID(t))
	assert.Equal(t, events.StateAmbiguous, op.State)
	assert.Equal(t, events.CodeAmbiguous, op.ErrorCode)
	assert.Contains(t, op.Error, "never run again")
	time.Sleep(2 * time.Second) // a respawn would have written again by now
	assert.Equal(t, 1, c.effects(t), "not respawned")
	assert.Equal(t, 1, terminals(t, srv, op.ID))
	out, _, code := srv.run(t, "ops", "list", "--state", "ambiguous", "--json")
	require.Equal(t, 0, code)
	assert.Contains(t, out, op.ID)
}
