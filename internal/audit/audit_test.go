package audit_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// The root of the empty tree differs between tlog versions (older ones
// answered the zero hash): the module is pinned in go.mod and its answer
// here, RFC 6962's SHA-256 of the empty string.
func TestEmptyRootIsPinned(t *testing.T) {
	assert.Equal(t, "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=", base64.StdEncoding.EncodeToString(audit.EmptyRoot[:]))
	assert.Equal(t, rfc6962.DefaultHasher.EmptyRoot(), audit.EmptyRoot[:])
}

func sampleLeaf() *audit.Leaf {
	return &audit.Leaf{
		Stream: "AIRLOCK_OPS", Subject: "airlock.v1.op.w.op_1.echo.granted", Seq: 42,
		Stored: time.Date(2026, 11, 29, 12, 0, 0, 123, time.UTC), Type: string(events.TypeGranted),
		ID: "id", Source: "airlock/gate", Time: "2026-11-29T12:00:00Z", Digest: "sha256:d",
		Space: "w", Op: "op_1", Hold: "hold_1", Tool: "echo", Agent: "ag", Actor: "alice", ActorKey: "UKEY",
		Policy: "sha256:p", Args: "sha256:a", Result: "", Code: "", Attempt: "",
	}
}

func TestLeafRoundTripAndRefusals(t *testing.T) {
	l := sampleLeaf()
	b := l.Encode()
	got, err := audit.DecodeLeaf(b)
	require.NoError(t, err)
	assert.Equal(t, l, got)

	for name, bad := range map[string][]byte{
		"empty":          nil,
		"other version":  append([]byte{2}, b[1:]...),
		"truncated":      b[:len(b)-1],
		"trailing bytes": append(append([]byte{}, b...), 0),
		// A length written in two bytes where one would do.
		"non-minimal": append([]byte{1, 42 | 0x80, 0}, b[2:]...),
		"too long":    bytes.Repeat([]byte{1}, audit.MaxLeafBytes+1),
	} {
		_, err := audit.DecodeLeaf(bad)
		assert.ErrorIs(t, err, audit.ErrBadLeaf, name)
	}
}

// Moving a byte from one field to the next changes the encoding: lengths
// keep fields apart.
func TestLeafFieldsDoNotRun(t *testing.T) {
	a, b := sampleLeaf(), sampleLeaf()
	a.Actor, a.ActorKey = "alice", "UKEY"
	b.Actor, b.ActorKey = "aliceU", "KEY"
	assert.NotEqual(t, a.Encode(), b.Encode())
}

// Every event type makes a leaf that names what the audit needs.
func TestNewLeafFromEvents(t *testing.T) {
	h := events.OpHeader{OpID: "op_0123456789abcdef0123456789abcdef", Workspace: "w"}
	sum := &events.Summary{Agent: "ag", Tool: "echo", ArgsDigest: "sha256:args"}
	subj := func(typ events.Type) string { return events.OpEventSubject("w", h.OpID, "echo", typ) }
	cases := []struct {
		typ  events.Type
		data any
		want func(l *audit.Leaf)
	}{
		{events.TypeDecided, &events.Decided{OpHeader: h, Request: sum, PolicyHash: "sha256:p"}, func(l *audit.Leaf) {
			assert.Equal(t, "ag", l.Agent)
			assert.Equal(t, "sha256:args", l.Args)
			assert.Equal(t, "sha256:p", l.Policy)
		}},
		{events.TypeGranted, &events.Granted{OpHeader: h, HoldID: "hold_x", ArgsDigest: "sha256:args", Approver: "alice", ApproverKey: "UALICE"}, func(l *audit.Leaf) {
			assert.Equal(t, "alice", l.Actor)
			assert.Equal(t, "UALICE", l.ActorKey)
			assert.Equal(t, "hold_x", l.Hold)
		}},
		{events.TypeDenied, &events.Denied{OpHeader: h, Code: events.CodeApprovalDenied, Actor: "bob", ActorKey: "UBOB", HoldID: "hold_x"}, func(l *audit.Leaf) {
			assert.Equal(t, "APPROVAL_DENIED", l.Code)
			assert.Equal(t, "bob", l.Actor)
		}},
		{events.TypeCompleted, &events.Completed{OpHeader: h, Attempt: "a1", ResultDigest: "sha256:out"}, func(l *audit.Leaf) {
			assert.Equal(t, "sha256:out", l.Result)
			assert.Equal(t, "a1", l.Attempt)
		}},
		{events.TypeClaimed, &events.Claimed{OpHeader: h, Attempt: "a1", Claim: events.Claim{Runner: "r1"}}, func(l *audit.Leaf) { assert.Equal(t, "r1", l.Actor) }},
		{events.TypeStarted, &events.Started{OpHeader: h, Attempt: "a1", Claim: &events.Claim{Runner: "r2"}}, func(l *audit.Leaf) { assert.Equal(t, "a1", l.Attempt); assert.Equal(t, "r2", l.Actor) }},
		{events.TypeModeSet, &events.ModeSet{Workspace: "w", Mode: "locked", Actor: "op", ActorKey: "UOP"}, func(l *audit.Leaf) {
			assert.Equal(t, "op", l.Actor)
			assert.Empty(t, l.Op)
		}},
	}
	for _, c := range cases {
		l := audit.NewLeaf("AIRLOCK_OPS", subj(c.typ), 7, time.Unix(1, 0), c.typ, "id", "src", "t", []byte("body"), c.data)
		assert.Equal(t, events.Digest([]byte("body")), l.Digest)
		if _, ok := events.IsOpEvent(c.data); ok {
			assert.Equal(t, h.OpID, l.Op)
			assert.Equal(t, "echo", l.Tool)
		}
		c.want(l)
		back, err := audit.DecodeLeaf(l.Encode())
		require.NoError(t, err)
		assert.Equal(t, l, back)
	}
}

// memHashes is a plain map of stored hashes: the reference the appender's
// frontier must agree with.
type memHashes map[int64]tlog.Hash

func (m memHashes) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(idx))
	for i, x := range idx {
		h, ok := m[x]
		if !ok {
			return nil, fmt.Errorf("no hash %d", x)
		}
		out[i] = h
	}
	return out, nil
}

func buildMem(t testing.TB, n int) (memHashes, [][]byte) {
	m := memHashes{}
	var leaves [][]byte
	for i := range n {
		leaf := []byte(fmt.Sprintf("leaf %d", i))
		hs, err := tlog.StoredHashes(int64(i), leaf, m)
		require.NoError(t, err)
		for j, h := range hs {
			m[tlog.StoredHashIndex(0, int64(i))+int64(j)] = h
		}
		leaves = append(leaves, leaf)
	}
	return m, leaves
}

// The appender's hashes and roots are tlog's, and compact ranges from
// transparency-dev/merkle agree, before and after a restart in the middle.
func TestAppenderMatchesReferences(t *testing.T) {
	const n = 1000
	ref, leaves := buildMem(t, n)
	rng := (&compact.RangeFactory{Hash: rfc6962.DefaultHasher.HashChildren}).NewEmptyRange(0)
	app := audit.NewAppender(0, nil)
	for i, leaf := range leaves {
		if i == 613 { // restart: only stored hashes remain
			app = audit.NewAppender(int64(i), ref)
		}
		idx, hs, err := app.Append(leaf)
		require.NoError(t, err)
		require.Equal(t, int64(i), idx)
		for j, h := range hs {
			require.Equal(t, ref[tlog.StoredHashIndex(0, idx)+int64(j)], h)
		}
		rh := tlog.RecordHash(leaf)
		require.NoError(t, rng.Append(rh[:], nil))
		if i%97 == 0 || i == n-1 {
			got, err := app.TreeHash()
			require.NoError(t, err)
			want, err := tlog.TreeHash(int64(i+1), ref)
			require.NoError(t, err)
			require.Equal(t, want, got)
			other, err := rng.GetRootHash(nil)
			require.NoError(t, err)
			require.Equal(t, want[:], other)
		}
	}
}

func TestCheckpointSignaturePolicy(t *testing.T) {
	k, _, err := audit.LoadOrCreateKey(t.TempDir())
	require.NoError(t, err)
	root := tlog.RecordHash([]byte("x"))
	c, err := k.Sign(5, root)
	require.NoError(t, err)
	got, err := audit.OpenCheckpoint(c.Note, k.Verifier)
	require.NoError(t, err)
	assert.Equal(t, int64(5), got.Size)
	assert.Equal(t, root, got.Root)
	assert.Equal(t, k.Origin, got.Origin)
	assert.True(t, strings.HasPrefix(k.Origin, audit.OriginPrefix))

	// Reloading the dir gives the same key.
	other, _, err := audit.LoadOrCreateKey(t.TempDir())
	require.NoError(t, err)
	// A key of the same name, another secret.
	skey, vkey, err := note.GenerateKey(rand.Reader, k.Origin)
	require.NoError(t, err)
	impostor, err := audit.ParseKey(skey, vkey)
	require.NoError(t, err)

	signText := func(text string, s note.Signer) []byte {
		b, err := note.Sign(&note.Note{Text: text}, s)
		require.NoError(t, err)
		return b
	}
	rootB64 := base64.StdEncoding.EncodeToString(root[:])
	otherSkey, _, err := note.GenerateKey(rand.Reader, "airlock.dev/log/other")
	require.NoError(t, err)
	otherSigner, err := note.NewSigner(otherSkey)
	require.NoError(t, err)
	flipped := append([]byte{}, c.Note...)
	flipped[len(k.Origin)+1] = '6' // the size line

	refused := map[string][]byte{
		"wrong key, same name": mustSign(t, impostor, 5, root),
		"unknown key":          mustSign(t, other, 5, root),
		"changed origin":       signText("airlock.dev/log/other\n5\n"+rootB64+"\n", otherSigner),
		"origin not the key's": signText("airlock.dev/log/feedfeed\n5\n"+rootB64+"\n", k.Signer),
		"extra line":           signText(k.Origin+"\n5\n"+rootB64+"\nextension\n", k.Signer),
		"no signature":         []byte(k.Origin + "\n5\n" + rootB64 + "\n\n"),
		"changed byte":         flipped,
		"bad size":             signText(k.Origin+"\n05\n"+rootB64+"\n", k.Signer),
		"negative size":        signText(k.Origin+"\n-5\n"+rootB64+"\n", k.Signer),
		"short root":           signText(k.Origin+"\n5\nAAAA\n", k.Signer),
		"too big":              append(bytes.Repeat([]byte("x"), audit.MaxCheckpointBytes), c.Note...),
	}
	for name, msg := range refused {
		_, err := audit.OpenCheckpoint(msg, k.Verifier)
		assert.ErrorIs(t, err, audit.ErrCheckpoint, name)
	}
	// A witness's cosignature beside the log's is fine.
	cosigned, err := note.Sign(&note.Note{Text: k.Origin + "\n5\n" + rootB64 + "\n"}, k.Signer, otherSigner)
	require.NoError(t, err)
	_, err = audit.OpenCheckpoint(cosigned, k.Verifier)
	assert.NoError(t, err)
}

func mustSign(t *testing.T, k *audit.Key, size int64, root tlog.Hash) []byte {
	c, err := k.Sign(size, root)
	require.NoError(t, err)
	return c.Note
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	k1, created, err := audit.LoadOrCreateKey(dir)
	require.NoError(t, err)
	require.True(t, created)
	k2, created, err := audit.LoadOrCreateKey(dir)
	require.NoError(t, err)
	require.False(t, created)
	assert.Equal(t, k1.Origin, k2.Origin)
	assert.Equal(t, k1.Public, k2.Public)
	v, err := audit.ReadVerifier(dir + "/" + audit.PubFile)
	require.NoError(t, err)
	assert.Equal(t, k1.Origin, v.Name())
	// Two deployments never share an origin.
	k3, _, err := audit.LoadOrCreateKey(t.TempDir())
	require.NoError(t, err)
	assert.NotEqual(t, k1.Origin, k3.Origin)
}

// proofSource serves leaves and stored hashes from memory.
type proofSource struct {
	memHashes
	leaves [][]byte
}

func (p proofSource) Leaf(i int64) ([]byte, error) { return p.leaves[i], nil }

func TestProofFile(t *testing.T) {
	k, _, err := audit.LoadOrCreateKey(t.TempDir())
	require.NoError(t, err)
	m := memHashes{}
	var leaves [][]byte
	op := "op_0123456789abcdef0123456789abcdef"
	var mine []int64
	for i := range 50 {
		l := sampleLeaf()
		l.Seq = uint64(i + 1)
		if i%7 == 3 {
			l.Op = op
			l.Subject = events.OpEventSubject("w", op, "echo", events.TypeGranted)
			mine = append(mine, int64(i))
		}
		b := l.Encode()
		hs, err := tlog.StoredHashes(int64(i), b, m)
		require.NoError(t, err)
		for j, h := range hs {
			m[tlog.StoredHashIndex(0, int64(i))+int64(j)] = h
		}
		leaves = append(leaves, b)
	}
	root, err := tlog.TreeHash(50, m)
	require.NoError(t, err)
	cp, err := k.Sign(50, root)
	require.NoError(t, err)
	src := proofSource{m, leaves}
	p, later, err := audit.Prove(src, op, append(mine, 60), cp)
	require.NoError(t, err)
	assert.Equal(t, 1, later, "a leaf beyond the checkpoint is left out")
	file := p.Marshal()
	got, err := audit.CheckProof(file, k.Verifier)
	require.NoError(t, err)
	require.Len(t, got.Leaves, len(mine))
	for i, l := range got.Leaves {
		assert.Equal(t, mine[i], l.Index)
		assert.Equal(t, op, l.Leaf.Op)
	}

	other, _, err := audit.LoadOrCreateKey(t.TempDir())
	require.NoError(t, err)
	s := string(file)
	firstLeaf := strings.SplitN(strings.SplitN(s, "leaf ", 2)[1], "\n", 2)[0] // "<index> <b64>"
	for name, bad := range map[string]string{
		"tampered leaf":       strings.Replace(s, firstLeaf, firstLeaf[:len(firstLeaf)-8]+"AAAAAAA=", 1),
		"other index":         strings.Replace(s, "leaf 3 ", "leaf 4 ", 1),
		"tampered proof hash": strings.Replace(s, "\n"+got.Leaves[0].Proof[0].String()+"\n", "\n"+tlog.RecordHash([]byte("z")).String()+"\n", 1),
		"dropped proof hash":  strings.Replace(s, "\n"+got.Leaves[0].Proof[0].String()+"\n", "\n", 1),
		"other op":            strings.Replace(s, "op "+op, "op op_ffffffffffffffffffffffffffffffff", 1),
		"no checkpoint":       strings.SplitN(s, "\n\n", 2)[0] + "\n",
		"not a proof":         "hello\n\n" + string(cp.Note),
		"no leaves":           audit.ProofHeader + "\nop " + op + "\n\n" + string(cp.Note),
	} {
		_, err := audit.CheckProof([]byte(bad), k.Verifier)
		assert.ErrorIs(t, err, audit.ErrProof, name)
	}
	_, err = audit.CheckProof(file, other.Verifier)
	assert.ErrorIs(t, err, audit.ErrProof, "another log's key")
}

// Inclusion proofs built with tlog verify under transparency-dev/merkle,
// and a changed proof, index or leaf fails under both.
func FuzzProofsDifferential(f *testing.F) {
	f.Add(uint16(1), uint16(0), uint16(0), byte(1))
	f.Add(uint16(300), uint16(17), uint16(3), byte(0x80))
	f.Add(uint16(64), uint16(63), uint16(1), byte(7))
	f.Fuzz(func(t *testing.T, n16, i16, at16 uint16, mask byte) {
		n := int64(n16%512) + 1
		i := int64(i16) % n
		m, leaves := buildMem(t, int(n))
		root, err := tlog.TreeHash(n, m)
		require.NoError(t, err)
		p, err := tlog.ProveRecord(n, i, m)
		require.NoError(t, err)
		rh := tlog.RecordHash(leaves[i])
		path := make([][]byte, len(p))
		for j := range p {
			path[j] = append([]byte{}, p[j][:]...)
		}
		require.NoError(t, tlog.CheckRecord(p, n, root, i, rh))
		require.NoError(t, proof.VerifyInclusion(rfc6962.DefaultHasher, uint64(i), uint64(n), rh[:], path, root[:]))

		// Consistency from a smaller tree, both ways.
		old := int64(at16)%n + 1
		oldRoot, err := tlog.TreeHash(old, m)
		require.NoError(t, err)
		tp, err := tlog.ProveTree(n, old, m)
		require.NoError(t, err)
		cpath := make([][]byte, len(tp))
		for j := range tp {
			cpath[j] = tp[j][:]
		}
		require.NoError(t, proof.VerifyConsistency(rfc6962.DefaultHasher, uint64(old), uint64(n), cpath, oldRoot[:], root[:]))

		if mask == 0 {
			mask = 1
		}
		if len(p) > 0 {
			at := int(at16) % len(p)
			bad := append(tlog.RecordProof{}, p...)
			bad[at][int(at16)%tlog.HashSize] ^= mask
			badPath := make([][]byte, len(bad))
			for j := range bad {
				badPath[j] = bad[j][:]
			}
			assert.Error(t, tlog.CheckRecord(bad, n, root, i, rh))
			assert.Error(t, proof.VerifyInclusion(rfc6962.DefaultHasher, uint64(i), uint64(n), rh[:], badPath, root[:]))
		}
		if n > 1 {
			other := (i + 1) % n
			assert.Error(t, tlog.CheckRecord(p, n, root, other, rh))
			assert.Error(t, proof.VerifyInclusion(rfc6962.DefaultHasher, uint64(other), uint64(n), rh[:], path, root[:]))
		}
		wrong := tlog.RecordHash(append([]byte("x"), leaves[i]...))
		assert.Error(t, tlog.CheckRecord(p, n, root, i, wrong))
		assert.Error(t, proof.VerifyInclusion(rfc6962.DefaultHasher, uint64(i), uint64(n), wrong[:], path, root[:]))
	})
}

// Any bytes that decode are the canonical encoding of what they decode
// to, so two distinct leaves never share bytes.
func FuzzLeafDecode(f *testing.F) {
	f.Add(sampleLeaf().Encode())
	f.Add([]byte{1, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := audit.DecodeLeaf(b)
		if err != nil {
			return
		}
		require.Equal(t, b, l.Encode())
	})
}

// Any leaf encodes to bytes that decode back to it.
func FuzzLeafRoundTrip(f *testing.F) {
	f.Add("AIRLOCK_OPS", "subj", uint64(1), int64(5), "t", "op", "actor", "key", "")
	f.Fuzz(func(t *testing.T, stream, subject string, seq uint64, ns int64, typ, op, actor, key, code string) {
		if ns < 0 {
			ns = -ns
		}
		l := &audit.Leaf{Stream: stream, Subject: subject, Seq: seq, Stored: time.Unix(0, ns).UTC(), Type: typ, Op: op, Actor: actor, ActorKey: key, Code: code}
		b := l.Encode()
		if len(b) > audit.MaxLeafBytes {
			return
		}
		got, err := audit.DecodeLeaf(b)
		require.NoError(t, err)
		require.Equal(t, l, got)
	})
}

// The verifier's light check accepts exactly what DecodeLeaf accepts.
func FuzzCheckLeafAgreesWithDecode(f *testing.F) {
	f.Add(sampleLeaf().Encode())
	f.Add([]byte{1, 0x80, 0, 0})
	withApproval := sampleLeaf()
	withApproval.Approval = `ed25519-nkey U sig {"v":1}`
	f.Add(withApproval.Encode())
	emptyApproval := append([]byte{audit.LeafVersionApproval}, sampleLeaf().Encode()[1:]...)
	f.Add(append(emptyApproval, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, derr := audit.DecodeLeaf(b)
		stream, seq, cerr := audit.CheckLeaf(b)
		require.Equal(t, derr == nil, cerr == nil, "decode %v, check %v", derr, cerr)
		if derr == nil {
			require.Equal(t, l.Stream, string(stream))
			require.Equal(t, l.Seq, seq)
			_, op, _, err := audit.CheckLeafOp(b)
			require.NoError(t, err)
			require.Equal(t, l.Op, string(op))
		}
	})
}

// A lone key or verifier file is a damaged dir: refused, never replaced
// by a new key.
func TestLoneKeyFileIsRefused(t *testing.T) {
	for _, gone := range []string{audit.PubFile, audit.KeyFile} {
		dir := t.TempDir()
		_, _, err := audit.LoadOrCreateKey(dir)
		require.NoError(t, err)
		other := audit.KeyFile
		if gone == audit.KeyFile {
			other = audit.PubFile
		}
		before, err := os.ReadFile(filepath.Join(dir, other))
		require.NoError(t, err)
		require.NoError(t, os.Remove(filepath.Join(dir, gone)))
		_, created, err := audit.LoadOrCreateKey(dir)
		require.Error(t, err, gone)
		assert.False(t, created)
		after, err := os.ReadFile(filepath.Join(dir, other))
		require.NoError(t, err)
		assert.Equal(t, before, after)
	}
}

// An op event stored on another op's subject (the projector skips it)
// does not name the op in its leaf, so it is neither indexed under the op
// nor accepted in the op's proof.
func TestLeafOfEventOnAnotherOpsSubject(t *testing.T) {
	x, y := "op_0123456789abcdef0123456789abcdef", "op_ffffffffffffffffffffffffffffffff"
	g := &events.Granted{OpHeader: events.OpHeader{OpID: x, Workspace: "w"}, Approver: "mallory"}
	l := audit.NewLeaf("AIRLOCK_OPS", events.OpEventSubject("w", y, "echo", events.TypeGranted), 3, time.Unix(1, 0), events.TypeGranted, "id", "src", "t", []byte("b"), g)
	assert.Empty(t, l.Op)
	assert.Equal(t, "mallory", l.Actor, "the leaf still records what the stream holds")
}

// The compact ranges' node hash is RFC 6962's, as merkle computes it.
func TestNodeHashIsRFC6962(t *testing.T) {
	for i := range 64 {
		l := bytes.Repeat([]byte{byte(i)}, sha256.Size)
		r := bytes.Repeat([]byte{byte(255 - i)}, sha256.Size)
		assert.Equal(t, rfc6962.DefaultHasher.HashChildren(l, r), audit.NodeHash(l, r))
	}
}
