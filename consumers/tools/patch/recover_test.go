package patch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// threeFiles modifies a.txt, adds new.txt and deletes old.txt.
const threeFiles = `diff --git a/a.txt b/a.txt
--- a/a.txt
+++ b/a.txt
@@ -1,2 +1,2 @@
-one
+ONE
 two
diff --git a/new.txt b/new.txt
new file mode 100644
--- /dev/null
+++ b/new.txt
@@ -0,0 +1 @@
+fresh
diff --git a/old.txt b/old.txt
deleted file mode 100644
--- a/old.txt
+++ /dev/null
@@ -1 +0,0 @@
-stale
`

func threeFilesEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t)
	e.write(t, "a.txt", "one\ntwo\n")
	e.write(t, "old.txt", "stale\n")
	return e
}

func recoverOp(t *testing.T, e *env, op string) executor.Recovery {
	t.Helper()
	c := call(t, op, threeFiles)
	c.Attempt = "att-2"
	rec, err := e.p.Recover(context.Background(), c, executor.Lost{Attempt: "att-1", Own: true})
	require.NoError(t, err)
	return rec
}

func TestRecoverWithoutLedgerReruns(t *testing.T) {
	e := threeFilesEnv(t)
	before := snapshot(t, e.root, e.ledger)
	rec := recoverOp(t, e, "op_none")
	assert.Equal(t, executor.Recovery{Action: executor.Rerun}, rec)
	assert.Equal(t, before, snapshot(t, e.root, e.ledger), "recovery writes nothing")
}

func TestRecoverAllPostIsDone(t *testing.T) {
	e := threeFilesEnv(t)
	_, raw, err := e.run(t, "op_post", threeFiles)
	require.NoError(t, err)
	rec := recoverOp(t, e, "op_post")
	assert.Equal(t, executor.Done, rec.Action)
	assert.Equal(t, string(raw), string(rec.Result), "the recovered result is the one Execute returned")
}

func TestRecoverAllPreReruns(t *testing.T) {
	e := threeFilesEnv(t)
	_, raw, err := e.run(t, "op_pre", threeFiles)
	require.NoError(t, err)
	// Back to every pre-image: as if the attempt died after its ledger.
	e.write(t, "a.txt", "one\ntwo\n")
	require.NoError(t, os.Remove(filepath.Join(e.root, "new.txt")))
	e.write(t, "old.txt", "stale\n")

	rec := recoverOp(t, e, "op_pre")
	assert.Equal(t, executor.Recovery{Action: executor.Rerun}, rec)

	// The rerun applies once and overwrites the ledger with its attempt.
	c := call(t, "op_pre", threeFiles)
	c.Attempt = "att-2"
	again, err := e.p.Execute(context.Background(), c)
	require.NoError(t, err)
	assert.JSONEq(t, string(raw), string(again))
	assert.Equal(t, "ONE\ntwo\n", e.read(t, "a.txt"))
	b, err := os.ReadFile(filepath.Join(e.ledger, "op_pre.json"))
	require.NoError(t, err)
	assert.Contains(t, string(b), `"attempt":"att-2"`)
}

func TestRecoverMixedIsAmbiguous(t *testing.T) {
	e := threeFilesEnv(t)
	_, _, err := e.run(t, "op_mixed", threeFiles)
	require.NoError(t, err)
	e.write(t, "old.txt", "stale\n") // the delete never happened
	rec := recoverOp(t, e, "op_mixed")
	assert.Equal(t, executor.Ambiguous, rec.Action)
	assert.Contains(t, rec.Known, "file 1 of 3 holds its post-image")
	assert.Contains(t, rec.Known, "file 2 of 3 holds its post-image")
	assert.Contains(t, rec.Known, "file 3 of 3 holds its pre-image")
	assert.Contains(t, rec.Known, "att-1")

	e.write(t, "a.txt", "edited by someone\n")
	rec = recoverOp(t, e, "op_mixed")
	assert.Equal(t, executor.Ambiguous, rec.Action)
	assert.Contains(t, rec.Known, "file 1 of 3 holds neither: "+sha("edited by someone\n"))
}

// TestRecoverFromWrittenLedger writes a ledger by hand and only some of
// its files, as a crash between files leaves them.
func TestRecoverFromWrittenLedger(t *testing.T) {
	e := newEnv(t)
	e.write(t, "x", "x1\n") // written: post
	e.write(t, "y", "y0\n") // not yet written: pre
	led := fmt.Sprintf(`{"op":"op_hand","attempt":"att-1","files":[
		{"path":"x","action":"modify","pre":%q,"post":%q},
		{"path":"y","action":"modify","pre":%q,"post":%q},
		{"path":"z","action":"add","pre":"absent","post":%q}]}`,
		sha("x0\n"), sha("x1\n"), sha("y0\n"), sha("y1\n"), sha("z1\n"))
	require.NoError(t, os.WriteFile(filepath.Join(e.ledger, "op_hand.json"), []byte(led), 0o600))

	rec := recoverOp(t, e, "op_hand")
	assert.Equal(t, executor.Ambiguous, rec.Action)
	assert.Contains(t, rec.Known, "file 1 of 3 holds its post-image")
	assert.Contains(t, rec.Known, "file 2 of 3 holds its pre-image")
	assert.Contains(t, rec.Known, "file 3 of 3 holds its pre-image")

	e.write(t, "y", "y1\n")
	e.write(t, "z", "z1\n")
	rec = recoverOp(t, e, "op_hand")
	require.Equal(t, executor.Done, rec.Action)
	var res struct {
		Files []map[string]string `json:"files"`
	}
	require.NoError(t, json.Unmarshal(rec.Result, &res))
	require.Len(t, res.Files, 3)
	assert.Equal(t, "z", res.Files[2]["path"])

	// A symlink where a file was is neither, and is not followed.
	require.NoError(t, os.Remove(filepath.Join(e.root, "z")))
	require.NoError(t, os.Symlink("x", filepath.Join(e.root, "z")))
	rec = recoverOp(t, e, "op_hand")
	assert.Equal(t, executor.Ambiguous, rec.Action)
	assert.Contains(t, rec.Known, "file 3 of 3 holds neither: unreadable")
}

func TestRecoverTornLedgerIsAmbiguous(t *testing.T) {
	e := threeFilesEnv(t)
	require.NoError(t, os.WriteFile(filepath.Join(e.ledger, "op_torn.json"), []byte(`{"op":"op_to`), 0o600))
	rec := recoverOp(t, e, "op_torn")
	assert.Equal(t, executor.Ambiguous, rec.Action)
	assert.Contains(t, rec.Known, "ledger")
}

func TestRecoverWithoutRootIsAnError(t *testing.T) {
	e := threeFilesEnv(t)
	_, _, err := e.run(t, "op_r", threeFiles)
	require.NoError(t, err)
	c := call(t, "op_r", threeFiles)
	c.Workspace = "gone"
	_, err = e.p.Recover(context.Background(), c, executor.Lost{Attempt: "att-1", Own: true})
	require.Error(t, err)
	assert.Equal(t, events.CodeNoWorkspaceRoot, events.CodeOf(err))
}

func TestOperands(t *testing.T) {
	e := threeFilesEnv(t)
	before := snapshot(t, e.root, e.ledger)
	ops, err := e.p.Operands(context.Background(), testWS, args(t, threeFiles))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		"a.txt":   sha("one\ntwo\n"),
		"new.txt": "absent",
		"old.txt": sha("stale\n"),
	}, ops)
	assert.Equal(t, before, snapshot(t, e.root, e.ledger), "operands write nothing")

	// They are the pre hashes Execute records.
	res, _, err := e.run(t, "op_operands", threeFiles)
	require.NoError(t, err)
	for _, f := range res.Files {
		assert.Equal(t, ops[f.Path], f.Pre, f.Path)
	}

	// A changed file yields a changed hash.
	after, err := e.p.Operands(context.Background(), testWS, args(t, threeFiles))
	require.NoError(t, err)
	assert.Equal(t, sha("ONE\ntwo\n"), after["a.txt"])
	assert.Equal(t, sha("fresh\n"), after["new.txt"])
	assert.Equal(t, "absent", after["old.txt"])
}

func TestOperandsErrors(t *testing.T) {
	e := threeFilesEnv(t)
	outside := t.TempDir()
	require.NoError(t, os.Symlink(outside, filepath.Join(e.root, "out")))
	_, err := e.p.Operands(context.Background(), testWS, args(t, threeFiles+"--- /dev/null\n+++ b/out/x\n@@ -0,0 +1 @@\n+y\n"))
	requireCode(t, err, events.CodePathEscape)
	_, err = e.p.Operands(context.Background(), testWS, args(t, "--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n"))
	requireCode(t, err, events.CodePathEscape)
	_, err = e.p.Operands(context.Background(), testWS, args(t, "not a diff"))
	requireCode(t, err, events.CodeInvalidPatch)
	_, err = e.p.Operands(context.Background(), testWS, json.RawMessage(`{"patch":3}`))
	requireCode(t, err, events.CodeInvalidArgs)
}
