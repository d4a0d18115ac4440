package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/apptest"
	"github.com/airlock-dev/airlock/consumers/projector"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Executors serve the workspaces their host has: work for a workspace
// goes to its group's processes only, a workspace no group serves is
// denied at the decision, and a process that would change its group's
// workspaces is refused.
func TestWorkspaceAffinity(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	dirs := testenv.DeploymentDirs(t)
	spec := policy.Spec{DefaultMode: "auto", Workspaces: map[string]policy.WorkspaceSpec{
		"alpha": {Mode: "auto", Root: t.TempDir()}, "beta": {Mode: "auto", Root: t.TempDir()}, "gamma": {Mode: "auto", Root: t.TempDir()},
	}}
	start := func(group string, ws ...string) (*app.App, error) {
		cfg := app.Config{DataDir: dirs(), NATSURL: n.Server.ClientURL(), Policy: spec, ExecutorGroup: group, ExecutorWorkspaces: ws, StartTimeout: 20 * time.Second}
		a, err := app.Start(context.Background(), cfg)
		if err == nil {
			t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
		}
		return a, err
	}
	a, err := start("host-a", "alpha")
	require.NoError(t, err)
	b, err := start("host-b", "beta")
	require.NoError(t, err)
	c, _ := apptest.Client(t, a.ClientURL())
	ops, err := n.JetStream.Stream(context.Background(), streams.Ops)
	require.NoError(t, err)

	ran := map[string]string{"alpha": a.Instance, "beta": b.Instance}
	for ws, instance := range ran {
		for i := range 5 {
			out, err := c.Submit(context.Background(), events.Request{Workspace: ws, Agent: "agent", Tool: "exec", Args: json.RawMessage(fmt.Sprintf(`{"argv":["/bin/true","%d"]}`, i))})
			require.NoError(t, err)
			require.Equal(t, events.StateCompleted, out.State, "%s: %s %s", ws, out.Code, out.Message)
			started, err := oplog.LastOf(context.Background(), ops, oplog.Op{Workspace: ws, ID: out.OpID, Tool: "exec"}, events.TypeStarted)
			require.NoError(t, err)
			claim := started.Data.(*events.Started).Claim
			require.NotNil(t, claim)
			assert.Equal(t, instance, claim.Instance, "an op of %s runs on the process that serves it", ws)
		}
	}

	out, err := c.Submit(context.Background(), events.Request{Workspace: "gamma", Agent: "agent", Tool: "exec", Args: json.RawMessage(`{"argv":["/bin/true"]}`)})
	require.NoError(t, err)
	assert.Equal(t, events.StateDenied, out.State)
	assert.Equal(t, events.CodeNoExecutor, out.Code)
	assert.Contains(t, out.Message, "no executor serves tool exec in workspace gamma")
	assert.Contains(t, out.Message, "--workspaces")

	_, err = start("host-a", "alpha", "gamma")
	require.ErrorIs(t, err, streams.ErrGroupMismatch)
	assert.Contains(t, err.Error(), "give every process of a group the same --workspaces, or another --executor-group")

	// A group that serves gamma, started later, is seen at once.
	_, err = start("host-c", "gamma")
	require.NoError(t, err)
	out, err = c.Submit(context.Background(), events.Request{Workspace: "gamma", Agent: "agent", Tool: "exec", Args: json.RawMessage(`{"argv":["/bin/true","again"]}`)})
	require.NoError(t, err)
	assert.Equal(t, events.StateCompleted, out.State, "%s %s", out.Code, out.Message)
}

// Every instance of a deployment keeps the same audit log: one origin, the
// same root at the same size, one checkpoint per size in JetStream. An
// instance that was down while the others went on starts behind the
// deployment's newest checkpoint and catches up; an instance with another
// audit key is refused.
func TestOneAuditLogPerDeployment(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	dirs := testenv.DeploymentDirs(t)
	cfg := func(dir string) app.Config {
		return app.Config{DataDir: dir, NATSURL: n.Server.ClientURL(), CheckpointInterval: 20 * time.Millisecond}
	}
	da, db := dirs(), dirs()
	a := apptest.StartApp(t, cfg(da))
	b := apptest.StartApp(t, cfg(db))
	c, _ := apptest.Client(t, a.ClientURL())
	submit := func(from, to int) {
		for i := from; i < to; i++ {
			out, err := c.Submit(context.Background(), events.Request{Workspace: "log", Agent: "agent", Tool: "echo", Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
			require.NoError(t, err)
			require.Equal(t, events.StateCompleted, out.State)
		}
	}
	submit(0, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, b.Shutdown(ctx))
	require.NotNil(t, b.Projector.Latest(), "a clean stop signs the log's tail")
	stopped := b.Projector.Latest().Size
	submit(10, 30) // b is behind now
	kv, err := n.JetStream.KeyValue(ctx, streams.AuditBucket)
	require.NoError(t, err)
	var shared int64
	require.Eventually(t, func() bool {
		e, err := kv.Get(ctx, streams.AuditCheckpointKey(a.AuditKey.Origin))
		shared = -1
		if err == nil {
			shared = audit.PeekSize(e.Value())
		}
		return err == nil && shared > stopped
	}, 10*time.Second, 20*time.Millisecond, "the deployment's checkpoint moved on")

	b = apptest.StartApp(t, cfg(db))
	require.True(t, b.AuditReport.OK(), "a start behind the deployment's newest checkpoint is not a rollback: %+v", b.AuditReport)
	assert.Equal(t, stopped, b.AuditReport.Size)
	assert.Equal(t, stopped, b.AuditReport.CheckpointSize)
	last, err := opsLast(ctx, n.JetStream)
	require.NoError(t, err)
	require.NoError(t, b.Projector.WaitApplied(ctx, last))
	require.NoError(t, a.Projector.WaitApplied(ctx, last))
	require.NoError(t, a.Shutdown(ctx))
	require.NoError(t, b.Shutdown(ctx))

	var reps []*audit.Report
	for _, dir := range []string{da, db} {
		st, err := store.Open(filepath.Join(dir, app.StoreDir))
		require.NoError(t, err)
		key, err := audit.LoadKey(dir)
		require.NoError(t, err)
		rep, err := audit.Verify(st, audit.Options{Verifier: key.Verifier})
		require.NoError(t, err)
		require.NoError(t, st.Close())
		require.True(t, rep.OK(), "%s: %+v", dir, rep)
		reps = append(reps, rep)
	}
	assert.Equal(t, reps[0].Origin, reps[1].Origin)
	assert.Equal(t, reps[0].Size, reps[1].Size)
	assert.Equal(t, reps[0].Root, reps[1].Root)
	assert.Equal(t, reps[0].CheckpointSize, reps[1].CheckpointSize)
	for _, dir := range []string{da, db} {
		_, err := kv.Get(ctx, streams.AuditInstanceKey(reps[0].Origin, instance(t, dir)))
		assert.NoError(t, err, "each instance keeps its own newest checkpoint")
	}

	// A data dir with a key of its own is another log: refused.
	_, err = app.Start(ctx, app.Config{DataDir: t.TempDir(), NATSURL: n.Server.ClientURL(), StartTimeout: 10 * time.Second})
	require.ErrorIs(t, err, projector.ErrOtherLog)
	assert.Contains(t, err.Error(), "copy audit.key and audit.pub from a data dir of this deployment")
}

func opsLast(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	st, err := js.Stream(ctx, streams.Ops)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.LastSeq, nil
}

// instance is a data dir's instance id.
func instance(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, app.InstanceFile))
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}
