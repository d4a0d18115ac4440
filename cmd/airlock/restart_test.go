package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// After a kill -9, the restarted process recovers the claims its previous
// life held at once, not one claim timeout (30 s) after the crash: the
// embedded server has no other consumer, so what was left unacknowledged
// is delivered again at start.
func TestCrashRestartRecoversOwnClaimsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess crash test")
	}
	dir, ledger, addr := t.TempDir(), t.TempDir(), freePort(t)
	env := []string{"AIRLOCK_TEST_LEDGER=" + ledger}
	srv := startServer(t, dir, addr, env)
	out, errOut, code := srv.run(t, "submit", "--ws", "r", "--tool", "count_slow", "--args", `{"slow":1}`, "--wait", "1s", "--json")
	require.Equal(t, 3, code, out+errOut)
	var pending struct {
		OpID string `json:"op_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &pending))
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(ledger, pending.OpID))
		return err == nil
	}, 20*time.Second, 20*time.Millisecond, "the op runs")
	// What it waits for, while it runs: its attempt and this data dir.
	instance, err := os.ReadFile(filepath.Join(dir, "instance"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		out, _, _ := srv.run(t, "ops", "get", pending.OpID)
		return strings.Contains(out, "instance "+strings.TrimSpace(string(instance))) && strings.Contains(out, "(started)")
	}, 10*time.Second, 50*time.Millisecond, "ops get says what the op waits for")
	srv.kill()

	restarted := time.Now()
	srv = startServer(t, dir, addr, env)
	var state string
	require.Eventually(t, func() bool {
		out, _, code := srv.run(t, "ops", "get", pending.OpID, "--json")
		var op struct {
			State string `json:"state"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &op) != nil {
			return false
		}
		state = op.State
		return state == "completed" || state == "ambiguous"
	}, 60*time.Second, 100*time.Millisecond)
	took := time.Since(restarted)
	t.Logf("op %s %s %s after the restart", pending.OpID, state, took.Round(time.Millisecond))
	assert.Equal(t, "completed", state, "its own ledger shows it ran")
	assert.Less(t, took, 15*time.Second, "recovered at once, not after the claim timeout")
	b, err := os.ReadFile(filepath.Join(ledger, "DOUBLE"))
	assert.True(t, os.IsNotExist(err), "ran twice: %s", b)
}
