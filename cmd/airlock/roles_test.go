package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A command run with a credential of the wrong role, or with none, fails
// at once and says what it needs; a refused publish is never reported as
// a pending op.
func TestWrongRoleFailsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	srv := startServer(t, t.TempDir(), freePort(t), []string{"AIRLOCK_TEST_LEDGER=" + t.TempDir()}, "--workspace-mode", "review=confirm")
	creds := func(name string) string { return filepath.Join(srv.dir, "creds", name+".creds") }

	// The bound is a second of the command's own waiting; the rest is the
	// start of a race-built binary on a busy machine.
	const bound = 3 * time.Second
	timed := func(args ...string) (string, string, int, time.Duration) {
		start := time.Now()
		out, errOut, code := srv.run(t, args...)
		return out, errOut, code, time.Since(start)
	}

	// An agent submitting under another agent's name.
	out, errOut, code, took := timed("submit", "--ws", "dev", "--tool", "echo", "--agent", "bob", "--wait", "20s")
	assert.Equal(t, 1, code, out+errOut)
	assert.Less(t, took, bound)
	assert.Contains(t, errOut, "PERMISSION_DENIED")
	assert.Regexp(t, `"airlock\.v1\.(req\.dev|reply)\.bob[^"]*"`, errOut, "the refused subject")
	assert.Contains(t, errOut, "principal agent, role agent")
	assert.Contains(t, errOut, "only under its own name")
	assert.Contains(t, errOut, "--agent bob")
	assert.NotContains(t, out, "pending")

	// An approver's credential submitting, with --json.
	out, errOut, code, took = timed("submit", "--ws", "dev", "--tool", "echo", "--creds", creds("approver"), "--json", "--wait", "20s")
	assert.Equal(t, 1, code, out+errOut)
	assert.Less(t, took, bound)
	var res struct {
		State   string `json:"state"`
		Code    string `json:"error_code"`
		Message string `json:"error"`
		Pending bool   `json:"pending"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	assert.Equal(t, "error", res.State)
	assert.Equal(t, "PERMISSION_DENIED", res.Code)
	assert.Contains(t, res.Message, "role approver")
	assert.Contains(t, res.Message, "needs an agent credential")
	assert.False(t, res.Pending)

	// A hold to resolve.
	heldOp, heldID := submitHeld(t, srv, "review", "count", `{"x":1}`)

	for _, c := range []struct {
		name, creds, needs string
		args               []string
	}{
		{"agent grants", "agent", "needs an approver credential", []string{"holds", "grant", heldID, "--reason", "mine"}},
		{"operator grants", "operator", "needs an approver credential", []string{"holds", "grant", heldID, "--reason", "mine"}},
		{"agent sets a mode", "agent", "needs an operator credential", []string{"ctl", "mode", "review", "auto", "--reason", "sneaky"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code, took := timed(append(c.args, "--creds", creds(c.creds))...)
			assert.Equal(t, 1, code, out+errOut)
			assert.Less(t, took, bound)
			assert.Contains(t, errOut, "PERMISSION_DENIED")
			assert.Contains(t, errOut, c.needs)
			assert.Contains(t, errOut, "role "+c.creds)
			assert.NotContains(t, errOut, "deadline exceeded")
		})
	}
	out, _, code = srv.run(t, "ops", "get", heldOp, "--json")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, `"state":"held"`, "nothing a refused command sent changed the op")
	assert.Contains(t, out, `"waits":"for an approver to grant or deny `+heldID+`, until `)

	// No credential: where the command looked, and what changes it.
	empty := t.TempDir()
	_, errOut, code = run(t, "ops", "list", "--server="+srv.url, "--data="+empty)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "NO_CREDENTIAL")
	assert.Contains(t, errOut, filepath.Join(empty, "creds", "auditor.creds"))
	assert.Contains(t, errOut, "--data")
	assert.Contains(t, errOut, "--creds")
	assert.NotContains(t, errOut, "Authorization Violation\n")
}

// holds grant waits for where the op went: exit 0 only when it ran, 4
// when a lockdown since the hold denied it on resume; holds deny says
// "denied".
func TestGrantSaysWhereTheOpWent(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	srv := startServer(t, t.TempDir(), freePort(t), []string{"AIRLOCK_TEST_LEDGER=" + t.TempDir()}, "--workspace-mode", "review=confirm")
	hold := func(args string) (string, string) { return submitHeld(t, srv, "review", "count", args) }

	// Granted and run.
	op, h := hold(`{"n":1}`)
	out, errOut, code := srv.run(t, "holds", "grant", h, "--reason", "fine")
	assert.Equal(t, 0, code, out+errOut)
	assert.Regexp(t, `granted: op `+op+` (executing|completed)`, out)

	// Denied by the approver: said right.
	_, h = hold(`{"n":2}`)
	out, _, code = srv.run(t, "holds", "deny", h, "--reason", "no")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, h+" denied: op ")
	assert.NotContains(t, out, "denyed")

	// Granted, then denied on resume by a lockdown taken since the hold.
	op, h = hold(`{"n":3}`)
	out, _, code = srv.run(t, "ctl", "mode", "review", "locked", "--reason", "incident")
	require.Equal(t, 0, code, out)
	out, errOut, code = srv.run(t, "holds", "grant", h, "--reason", "fine", "--json")
	assert.Equal(t, 4, code, out+errOut)
	var res struct {
		State string `json:"state"`
		Code  string `json:"error_code"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	assert.Equal(t, "denied", res.State)
	assert.Equal(t, "RESUME_DENIED", res.Code)
	out, _, code = srv.run(t, "ops", "get", op, "--json")
	require.Equal(t, 0, code)
	assert.Contains(t, out, `"state":"denied"`)
	assert.True(t, strings.Contains(out, "WORKSPACE_LOCKED"), out)
}

// submitHeld submits a request that policy holds and waits until an
// approver can see its hold; it returns the op and hold ids.
func submitHeld(t *testing.T, srv *server, ws, tool, args string) (string, string) {
	t.Helper()
	out, _, code := srv.run(t, "submit", "--ws", ws, "--tool", tool, "--args", args, "--json")
	require.Equal(t, 3, code, out)
	var held struct {
		OpID   string `json:"op_id"`
		HoldID string `json:"hold_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &held))
	require.Eventually(t, func() bool {
		_, _, code := srv.run(t, "holds", "show", held.HoldID)
		return code == 0
	}, 10*time.Second, 50*time.Millisecond)
	return held.OpID, held.HoldID
}
