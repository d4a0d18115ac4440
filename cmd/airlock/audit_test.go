package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/cockroachdb/pebble/v2"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type verifyJSON struct {
	Status         string   `json:"status"`
	Index          *int64   `json:"index"`
	Size           int64    `json:"size"`
	Root           string   `json:"root"`
	Origin         string   `json:"origin"`
	CheckpointSize int64    `json:"checkpoint_size"`
	Anchors        []string `json:"anchors"`
	Unchecked      []string `json:"anchors_unchecked"`
}

func auditVerify(t testing.TB, args ...string) (verifyJSON, int, string) {
	t.Helper()
	out, errOut, code := run(t, append([]string{"audit", "verify", "--json"}, args...)...)
	var v verifyJSON
	require.NoError(t, json.Unmarshal([]byte(out), &v), "stdout %q stderr %q", out, errOut)
	return v, code, errOut
}

// submitEcho runs n echo ops to completion.
func submitEcho(t *testing.T, srv *server, ws string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		out, errOut, code := srv.run(t, "submit", "--ws", ws, "--tool", "echo", "--args", `{"n":`+strconv.Itoa(i)+`,"ws":"`+ws+`"}`, "--json")
		require.Equal(t, 0, code, "%s %s", out, errOut)
		var o struct {
			OpID string `json:"op_id"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &o))
		ids = append(ids, o.OpID)
	}
	return ids
}

// The live log verifies remotely and offline; replay rebuilds the same
// root and the same ops; a proof names the approver and checks with the
// public key alone.
func TestAuditLiveReplayAndProof(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	dir := t.TempDir()
	srv := startServer(t, dir, freePort(t), nil, "--checkpoint-interval", "100ms", "--workspace-mode", "rev=confirm", "--tool-class", "echo=write")
	submitEcho(t, srv, "w1", 4)

	// A held op granted by the approver.
	out, _, code := srv.run(t, "submit", "--ws", "rev", "--tool", "echo", "--args", `{"x":1}`, "--json")
	require.Equal(t, exitPending, code, out)
	var held struct {
		OpID   string `json:"op_id"`
		HoldID string `json:"hold_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &held))
	require.NotEmpty(t, held.HoldID, out)
	out, errOut, code := srv.run(t, "holds", "grant", held.HoldID, "--reason", "looks fine")
	require.Equal(t, 0, code, "%s %s", out, errOut)
	require.Eventually(t, func() bool {
		out, _, _ := srv.run(t, "ops", "get", held.OpID, "--json")
		return strings.Contains(out, `"state":"completed"`)
	}, 20*time.Second, 100*time.Millisecond)

	live, code, errOut := auditVerify(t, "--remote", "--jetstream-checkpoint", "--server="+srv.url, "--data="+dir)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "OK", live.Status)
	assert.Positive(t, live.Size)

	// The proof of the held op, checked with nothing but audit.pub.
	proofFile := filepath.Join(t.TempDir(), "op.proof")
	out, errOut, code = srv.run(t, "audit", "prove", held.OpID, "-o", proofFile)
	require.Equal(t, 0, code, "%s %s", out, errOut)
	pub := filepath.Join(t.TempDir(), "audit.pub")
	b, err := os.ReadFile(filepath.Join(dir, audit.PubFile))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(pub, b, 0o644))
	out, errOut, code = run(t, "audit", "check-proof", proofFile, "--key", pub, "--json")
	require.Equal(t, 0, code, "%s %s", out, errOut)
	var proven struct {
		Status string `json:"status"`
		Leaves []struct {
			Type     string `json:"Type"`
			Actor    string `json:"Actor"`
			ActorKey string `json:"ActorKey"`
			Args     string `json:"Args"`
		} `json:"leaves"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &proven))
	var types []string
	for _, l := range proven.Leaves {
		types = append(types, l.Type)
		if strings.HasSuffix(l.Type, ".granted.v1") {
			assert.Equal(t, "approver", l.Actor)
			assert.NotEmpty(t, l.ActorKey, "the credential the grant came from")
		}
	}
	// Started by the gate that took the grant (ADR 0029): no decided event.
	require.GreaterOrEqual(t, len(types), 4, "%v", types)
	assert.Equal(t, []string{"dev.airlock.op.held.v1", "dev.airlock.op.granted.v1",
		"dev.airlock.op.started.v1", "dev.airlock.op.completed.v1"}, types[:4])
	// The grant's approval: signed by the approver's own key, verified
	// offline with the log's key and with the exported approvers' keys.
	out, errOut, code = run(t, "audit", "check-proof", proofFile, "--key", pub)
	require.Equal(t, 0, code, "%s %s", out, errOut)
	assert.Regexp(t, `approval #\d+: grant of hold_[0-9a-f]{32} by approver at \S+Z, args sha256:[0-9a-f]{64}: ed25519-nkey signature over statement sha256:[0-9a-f]{64} verified with the key the log records \(U`, out)
	approvers := filepath.Join(t.TempDir(), "approvers.json")
	out, errOut, code = srv.run(t, "approvers", "export")
	require.Equal(t, 0, code, errOut)
	require.NoError(t, os.WriteFile(approvers, []byte(out), 0o644))
	out, errOut, code = run(t, "audit", "check-proof", proofFile, "--key", pub, "--approvers", approvers)
	require.Equal(t, 0, code, "%s %s", out, errOut)
	assert.Contains(t, out, "verified with the approvers file's key")
	// An approvers file that gives the approver another key fails it.
	other := filepath.Join(t.TempDir(), "other.json")
	require.NoError(t, os.WriteFile(other, []byte(`{"approvers":[{"name":"approver","public_key":"UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NFCNAR"}]}`), 0o644))
	_, errOut, code = run(t, "audit", "check-proof", proofFile, "--key", pub, "--approvers", other)
	assert.Equal(t, exitAudit, code)
	assert.Contains(t, errOut, "but the approvers file gives approver the key")

	// A changed proof does not check.
	tampered := filepath.Join(t.TempDir(), "bad.proof")
	pf, err := os.ReadFile(proofFile)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(tampered, []byte(strings.Replace(string(pf), "leaf ", "leaf 9", 1)), 0o644))
	_, _, code = run(t, "audit", "check-proof", tampered, "--key", pub)
	assert.Equal(t, exitAudit, code)
	// Without --key, the data dir's audit.pub; with neither, a usage
	// error that says what to pass.
	out, errOut, code = run(t, "audit", "check-proof", proofFile, "--data", dir)
	assert.Equal(t, 0, code, "%s %s", out, errOut)
	_, errOut, code = run(t, "audit", "check-proof", proofFile, "--data", t.TempDir())
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "--key FILE")

	// Replay into an empty dir while the server runs.
	offline, into := replayMatches(t, srv, dir)
	assert.Equal(t, offline.Size, offline.CheckpointSize, "a clean stop signs every leaf")
	assert.Equal(t, live.Root, offlineRootAt(t, dir, live.Size), "the remote verifier saw the same tree")

	// The rebuilt projection holds the same ops.
	assert.Equal(t, allOps(t, dir), allOps(t, into))
}

// Ended ops leave AIRLOCK_OPS for the archive; a replay reads them from
// it in their places and rebuilds the live root and the same ops, and a
// retry of one of them runs nothing.
func TestReplayReadsArchivedOps(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	dir := t.TempDir()
	srv := startServer(t, dir, freePort(t), nil, "--checkpoint-interval", "100ms", "--archive-after", "1s", "--archive-keep", "4")
	ids := submitEcho(t, srv, "w1", 6)
	js, err := jetstream.New(srv.connect(t, authority.ServiceName))
	require.NoError(t, err)
	ctx := context.Background()
	ops, err := js.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	require.False(t, ops.CachedInfo().Config.DenyPurge, "a new deployment's ops stream lets archived ops go")
	// Every op's events left the stream: its first op event is now the
	// last op's, or later.
	require.Eventually(t, func() bool {
		_, err := oplog.Last(ctx, ops, "w1", ids[0])
		return errors.Is(err, oplog.ErrEmpty)
	}, 20*time.Second, 100*time.Millisecond)
	// A retry of the first op gets its outcome and runs nothing more.
	out, errOut, code := srv.run(t, "submit", "--ws", "w1", "--tool", "echo", "--args", `{"n":0,"ws":"w1"}`, "--json")
	require.Equal(t, 0, code, "%s %s", out, errOut)
	assert.Contains(t, out, ids[0])
	assert.Contains(t, out, `"state":"completed"`)

	_, into := replayMatches(t, srv, dir)
	assert.Equal(t, allOps(t, dir), allOps(t, into))
}

// replayMatches replays srv's streams into a new dir while it runs, stops
// it cleanly, and checks that the rebuilt log has the live one's size,
// root and origin. It returns the live log, verified offline, and the
// dir.
func replayMatches(t *testing.T, srv *server, dir string) (verifyJSON, string) {
	t.Helper()
	into := filepath.Join(t.TempDir(), "replayed")
	out, errOut, code := srv.run(t, "replay", "--into", into, "--json")
	require.Equal(t, 0, code, "%s %s", out, errOut)
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc, err := srv.stop(stopCtx)
	require.NoError(t, err)
	require.Equal(t, 0, rc, srv.stderr.String())

	offline, code, errOut := auditVerify(t, "--data", dir)
	require.Equal(t, 0, code, errOut)
	replayed, code, errOut := auditVerify(t, "--data", into)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, offline.Size, replayed.Size)
	assert.Equal(t, offline.Root, replayed.Root, "the rebuilt tree has the live root")
	assert.Equal(t, offline.Origin, replayed.Origin)
	return offline, into
}

// offlineRootAt is the root of the data dir's log at size n.
func offlineRootAt(t *testing.T, dir string, n int64) string {
	st, err := store.OpenReadOnly(filepath.Join(dir, app.StoreDir))
	require.NoError(t, err)
	defer st.Close()
	app := audit.NewAppender(0, nil)
	require.NoError(t, st.Leaves(0, func(i int64, leaf []byte) error {
		if i < n {
			_, _, err := app.Append(leaf)
			return err
		}
		return nil
	}))
	root, err := app.TreeHash()
	require.NoError(t, err)
	return root.String()
}

func allOps(t *testing.T, dir string) string {
	st, err := store.OpenReadOnly(filepath.Join(dir, app.StoreDir))
	require.NoError(t, err)
	defer st.Close()
	ops, _, err := st.List("", "", "", store.MaxPage)
	require.NoError(t, err)
	b, err := json.Marshal(ops)
	require.NoError(t, err)
	return string(b)
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	out, err := exec.Command("cp", "-a", from, to).CombinedOutput()
	require.NoError(t, err, string(out))
}

// serveRefused runs serve on dir and expects it to refuse to start.
func serveRefused(t *testing.T, dir string, args ...string) (int, string) {
	t.Helper()
	_, errOut, code := run(t, append([]string{"serve", "--data", dir, "--listen", freePort(t), "--monitor", ""}, args...)...)
	return code, errOut
}

// Tampering with a copy of the data dir is found by verify; restoring an
// older projection (rollback) or a rewritten, re-signed history (fork)
// makes serve refuse to start and verify name it.
func TestAuditTamperRollbackFork(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	dir := t.TempDir()
	addr := freePort(t)
	srv := startServer(t, dir, addr, nil, "--checkpoint-interval", "100ms")
	submitEcho(t, srv, "w1", 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := srv.stop(ctx)
	require.NoError(t, err)
	older := filepath.Join(t.TempDir(), "older")
	copyDir(t, filepath.Join(dir, app.StoreDir), older)

	srv = startServer(t, dir, addr, nil, "--checkpoint-interval", "100ms")
	submitEcho(t, srv, "w2", 3)
	saved := filepath.Join(t.TempDir(), "witness.ckpt")
	time.Sleep(300 * time.Millisecond) // a checkpoint over every op
	_, errOut, code := srv.run(t, "audit", "verify", "--remote", "--save-checkpoint", saved)
	require.Equal(t, 0, code, errOut)
	_, err = srv.stop(ctx)
	require.NoError(t, err)
	newer := filepath.Join(t.TempDir(), "newer")
	copyDir(t, filepath.Join(dir, app.StoreDir), newer)
	sound, code, _ := auditVerify(t, "--data", dir, "--trusted-checkpoint", saved)
	require.Equal(t, 0, code)

	t.Run("tamper with a copy", func(t *testing.T) {
		cp := filepath.Join(t.TempDir(), "copy")
		copyDir(t, dir, cp)
		db, err := pebble.Open(filepath.Join(cp, app.StoreDir), &pebble.Options{})
		require.NoError(t, err)
		k := append([]byte("t/l/"), 0, 0, 0, 0, 0, 0, 0, 5)
		v, closer, err := db.Get(k)
		require.NoError(t, err)
		b := append([]byte{}, v...)
		closer.Close()
		b[len(b)-3] ^= 0x20
		require.NoError(t, db.Set(k, b, pebble.Sync))
		require.NoError(t, db.Close())
		v2, code, _ := auditVerify(t, "--data", cp)
		assert.Equal(t, exitAudit, code)
		assert.Equal(t, "LEAF_MISMATCH", v2.Status)
		require.NotNil(t, v2.Index)
		assert.Equal(t, int64(5), *v2.Index)
		// Text output names it too.
		out, _, code := run(t, "audit", "verify", "--data", cp)
		assert.Equal(t, exitAudit, code)
		assert.Contains(t, out, "LEAF_MISMATCH{5}")
	})

	t.Run("rollback", func(t *testing.T) {
		require.NoError(t, os.RemoveAll(filepath.Join(dir, app.StoreDir)))
		copyDir(t, older, filepath.Join(dir, app.StoreDir))
		code, errOut := serveRefused(t, dir)
		assert.Equal(t, exitAudit, code, errOut)
		assert.Contains(t, errOut, "ROLLBACK")
		v, code, _ := auditVerify(t, "--data", dir, "--trusted-checkpoint", saved)
		assert.Equal(t, exitAudit, code)
		assert.Equal(t, "ROLLBACK", v.Status)
		assert.Equal(t, sound.Size, *v.Index, "the trusted checkpoint's size")
	})

	t.Run("fork", func(t *testing.T) {
		require.NoError(t, os.RemoveAll(filepath.Join(dir, app.StoreDir)))
		forgeHistory(t, newer, filepath.Join(dir, app.StoreDir), dir)
		code, errOut := serveRefused(t, dir)
		assert.Equal(t, exitAudit, code, errOut)
		assert.Contains(t, errOut, "FORK")
		// Offline, the data dir's checkpoint file is the anchor that
		// catches it; without it the forged log is sound on its own.
		v, code, _ := auditVerify(t, "--data", dir)
		assert.Equal(t, exitAudit, code, "%+v", v)
		assert.Equal(t, "FORK", v.Status)
		require.NoError(t, os.Rename(filepath.Join(dir, audit.CheckpointFile), filepath.Join(dir, audit.CheckpointFile+".aside")))
		v, code, _ = auditVerify(t, "--data", dir)
		assert.Equal(t, 0, code, "the forged log is sound on its own: %+v", v)
		require.NoError(t, os.Rename(filepath.Join(dir, audit.CheckpointFile+".aside"), filepath.Join(dir, audit.CheckpointFile)))
		v, code, _ = auditVerify(t, "--data", dir, "--trusted-checkpoint", saved)
		assert.Equal(t, exitAudit, code)
		assert.Equal(t, "FORK", v.Status)
	})

	t.Run("override", func(t *testing.T) {
		srv := startServer(t, dir, addr, nil, "--unsafe-audit-override")
		assert.Contains(t, srv.stderr.String(), "FORK")
		assert.Contains(t, srv.stderr.String(), "--unsafe-audit-override")
		// The checkpoint JetStream keeps is left as it was.
		nc := srv.connect(t, "auditor")
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		kv, err := js.KeyValue(ctx, streams.AuditBucket)
		require.NoError(t, err)
		e, err := kv.Get(ctx, streams.AuditCheckpointKey(sound.Origin))
		require.NoError(t, err)
		assert.Equal(t, sound.Size, audit.PeekSize(e.Value()))
	})
}

// forgeHistory writes into to a log with the leaves of from, one of them
// changed, every hash recomputed and every checkpoint signed with the
// data dir's real key: what someone holding the key and the disk could do.
func forgeHistory(t *testing.T, from, to, data string) {
	key, err := audit.LoadKey(data)
	require.NoError(t, err)
	src, err := store.OpenReadOnly(from)
	require.NoError(t, err)
	defer src.Close()
	dst, err := store.Open(to)
	require.NoError(t, err)
	defer dst.Close()
	b := dst.NewBatch()
	require.NoError(t, src.Leaves(0, func(i int64, leaf []byte) error {
		l, err := audit.DecodeLeaf(leaf)
		if err != nil {
			return err
		}
		if i == 3 {
			l.Actor = "nobody"
		}
		b.SetApplied(l.Seq) // the forger keeps the projection in step too
		return b.AppendLeaf(l.Encode(), l.Op)
	}))
	_, err = b.Checkpoint(key)
	require.NoError(t, err)
	require.NoError(t, b.Commit(true))
}

// SIGKILL at each step of the log's write path: after a restart the log
// verifies against its checkpoints and JetStream's, and holds one leaf per
// stream message, in order: no gap, no duplicate.
func TestCrashAuditWritePath(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	for _, fp := range []string{"audit-before-commit", "audit-after-commit", "audit-after-checkpoint", "audit-after-publish"} {
		t.Run(fp, func(t *testing.T) {
			dir, addr := t.TempDir(), freePort(t)
			args := []string{"--checkpoint-every", "3", "--checkpoint-interval", "50ms"}
			srv := startServer(t, dir, addr, []string{"AIRLOCK_FAILPOINT=" + fp + "@3"}, args...)
			for i := 0; i < 100; i++ {
				select {
				case <-srv.done:
				default:
					srv.run(t, "submit", "--ws", "w", "--tool", "echo", "--args", `{"i":`+strconv.Itoa(i)+`}`, "--wait", "2s")
					continue
				}
				break
			}
			select {
			case <-srv.done:
			case <-time.After(10 * time.Second):
				t.Fatalf("the failpoint never fired: %s", srv.stderr.String())
			}
			require.Contains(t, srv.stderr.String(), "failpoint "+fp)

			srv = startServer(t, dir, addr, nil, args...)
			submitEcho(t, srv, "w", 2)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rc, err := srv.stop(ctx)
			require.NoError(t, err)
			require.Equal(t, 0, rc, srv.stderr.String())

			v, code, errOut := auditVerify(t, "--data", dir)
			require.Equal(t, 0, code, "%s %+v", errOut, v)
			require.Equal(t, v.Size, v.CheckpointSize)
			st, err := store.OpenReadOnly(filepath.Join(dir, app.StoreDir))
			require.NoError(t, err)
			defer st.Close()
			applied, err := st.Applied()
			require.NoError(t, err)
			require.Equal(t, int64(applied), v.Size, "one leaf per applied message")
			require.NoError(t, st.Leaves(0, func(i int64, leaf []byte) error {
				l, err := audit.DecodeLeaf(leaf)
				require.NoError(t, err)
				require.Equal(t, uint64(i+1), l.Seq, "leaf %d", i)
				return nil
			}))
		})
	}
}

// A clean stop, however quick, signs every leaf and anchors the
// checkpoint outside the projection: proofs work at once, and an older
// projection put back after the stop is refused by serve and by an
// offline verify, which names the anchor it checked against.
func TestQuickStopSignsAndAnchors(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir, addr := t.TempDir(), freePort(t)
	srv := startServer(t, dir, addr, nil)
	ids := submitEcho(t, srv, "quick", 10)
	code, err := srv.stop(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, code)
	v, code, errOut := auditVerify(t, "--data", dir)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, v.Size, v.CheckpointSize, "a clean stop signs every leaf")
	assert.Contains(t, strings.Join(v.Anchors, "; "), audit.CheckpointFile+" (at "+strconv.FormatInt(v.Size, 10)+")")
	require.NotEmpty(t, v.Unchecked, "no server answers: the report says JetStream was not checked")
	assert.Contains(t, v.Unchecked[0], "jetstream")
	proof := filepath.Join(t.TempDir(), "op.proof")
	out, errOut, code := run(t, "audit", "prove", ids[9], "--data", dir, "-o", proof)
	require.Equal(t, 0, code, out+errOut)
	out, errOut, code = run(t, "audit", "check-proof", proof, "--data", dir)
	require.Equal(t, 0, code, out+errOut)

	// Twenty more ops, a stop at once, and the older projection back.
	older := filepath.Join(t.TempDir(), "older")
	copyDir(t, filepath.Join(dir, app.StoreDir), older)
	srv = startServer(t, dir, addr, nil)
	submitEcho(t, srv, "quick2", 20)
	_, err = srv.stop(ctx)
	require.NoError(t, err)
	require.NoError(t, os.RemoveAll(filepath.Join(dir, app.StoreDir)))
	copyDir(t, older, filepath.Join(dir, app.StoreDir))
	v, code, _ = auditVerify(t, "--data", dir)
	assert.Equal(t, exitAudit, code, "%+v", v)
	assert.Equal(t, "ROLLBACK", v.Status)
	out, _, code = run(t, "audit", "verify", "--data", dir)
	assert.Equal(t, exitAudit, code)
	assert.Contains(t, out, "anchors:")
	assert.Contains(t, out, audit.CheckpointFile)
	code, errOut = serveRefused(t, dir)
	assert.Equal(t, exitAudit, code, errOut)
	assert.Contains(t, errOut, "ROLLBACK")
}
