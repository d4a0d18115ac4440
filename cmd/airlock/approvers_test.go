package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/approvers"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/go-webauthn/webauthn/webauthn"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// check-proof's approval checks, on leaves made here: a signed grant
// passes; a grant by a keyed approver without an approval is UNSIGNED,
// and fails with an approvers file; a grant carrying another hold's
// signed statement fails; a key other than the approvers file's fails.
func TestCheckApprovals(t *testing.T) {
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	op := "op_00112233445566778899aabbccddeeff"
	args := events.Digest([]byte(`{}`))
	sign := func(hold string) *events.Approval {
		a, err := events.SignApproval(events.ApprovalStatement{HoldID: hold, OpID: op, Workspace: "w", ArgsDigest: args,
			OperandsDigest: events.OperandsDigest(nil), Decision: events.DecisionGrant, ReasonDigest: events.ReasonDigest("ok"),
			Approver: "ann", At: events.ApprovalTime(time.Now())}, seed)
		require.NoError(t, err)
		return a
	}
	leaf := func(a *events.Approval) audit.ProvenLeaf {
		g := &events.Granted{OpHeader: events.OpHeader{OpID: op, Workspace: "w"}, HoldID: events.HoldID(op), ArgsDigest: args,
			Approver: "ann", ApproverKey: pub, Reason: "ok", Approval: a}
		l := audit.NewLeaf("AIRLOCK_OPS", events.OpEventSubject("w", op, "exec", events.TypeGranted), 3, time.Now(), events.TypeGranted, "id", "airlock/gate", "t", []byte(`{}`), g)
		return audit.ProvenLeaf{Index: 3, Leaf: l}
	}
	proof := func(l audit.ProvenLeaf) *audit.Proof { return &audit.Proof{Op: op, Leaves: []audit.ProvenLeaf{l}} }
	keys := map[string]approverKey{"ann": {Name: "ann", PublicKey: pub}}

	var out bytes.Buffer
	require.NoError(t, checkApprovals(&out, proof(leaf(sign(events.HoldID(op)))), keys, false))
	assert.Contains(t, out.String(), "approval #3: grant of "+events.HoldID(op)+" by ann")
	assert.Contains(t, out.String(), ": ed25519-nkey signature over statement sha256:")
	assert.Contains(t, out.String(), "verified with the approvers file's key ("+pub+")")

	out.Reset()
	require.NoError(t, checkApprovals(&out, proof(leaf(nil)), nil, false))
	assert.Contains(t, out.String(), "UNSIGNED")
	assert.Error(t, checkApprovals(&out, proof(leaf(nil)), keys, false), "unsigned with an approvers file")

	err = checkApprovals(&out, proof(leaf(sign("hold_ffffffffffffffffffffffffffffffff"))), nil, false)
	assert.ErrorContains(t, err, "a statement of another resolution")

	other, _ := nkeys.CreateUser()
	otherPub, _ := other.PublicKey()
	err = checkApprovals(&out, proof(leaf(sign(events.HoldID(op)))), map[string]approverKey{"ann": {Name: "ann", PublicKey: otherPub}}, false)
	assert.ErrorContains(t, err, "but the approvers file gives ann the key")
}

// check-proof's approval checks of a passkey's approval: it verifies
// with the key the log records and, with an approvers file, must be by
// one of the approver's passkeys and made at that passkey's relying
// party; an assertion another origin asked for fails there.
func TestCheckApprovalsWebAuthn(t *testing.T) {
	rp := events.RelyingParty{ID: "example.com", Origin: "https://inbox.example.com"}
	pk := testenv.NewPasskey(t, rp)
	op := "op_00112233445566778899aabbccddeeff"
	args := events.Digest([]byte(`{}`))
	statement := events.ApprovalStatement{V: events.ApprovalVersion, HoldID: events.HoldID(op), OpID: op, Workspace: "w", ArgsDigest: args,
		OperandsDigest: events.OperandsDigest(nil), Decision: events.DecisionGrant, ReasonDigest: events.ReasonDigest("ok"),
		Approver: "ann", At: events.ApprovalTime(time.Now())}
	digest, err := statement.Digest()
	require.NoError(t, err)
	approval := func(sig string) *events.Approval {
		return &events.Approval{Statement: statement, Signature: events.ApprovalSignature{Alg: events.AlgWebAuthn, Key: pk.PublicKey(), Sig: sig}}
	}
	proof := func(a *events.Approval) *audit.Proof {
		g := &events.Granted{OpHeader: events.OpHeader{OpID: op, Workspace: "w"}, HoldID: events.HoldID(op), ArgsDigest: args,
			Approver: "ann", ApproverKey: pk.PublicKey(), Reason: "ok", Approval: a}
		l := audit.NewLeaf("AIRLOCK_OPS", events.OpEventSubject("w", op, "exec", events.TypeGranted), 3, time.Now(), events.TypeGranted, "id", "airlock/gate", "t", []byte(`{}`), g)
		return &audit.Proof{Op: op, Leaves: []audit.ProvenLeaf{{Index: 3, Leaf: l}}}
	}
	enrolled := passkeyKey{PublicKey: pk.PublicKey(), CredentialID: base64.RawURLEncoding.EncodeToString(pk.CredentialID()), RelyingParty: rp}
	file := map[string]approverKey{"ann": {Name: "ann", PublicKey: "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NFCNAR", Passkeys: []passkeyKey{enrolled}}}

	var out bytes.Buffer
	valid := proof(approval(pk.Sign(digest)))
	require.NoError(t, checkApprovals(&out, valid, nil, false))
	assert.Contains(t, out.String(), "approval #3: grant of "+events.HoldID(op)+" by ann")
	assert.Contains(t, out.String(), ": webauthn signature over statement "+digest+" verified with the key the log records ("+pk.PublicKey()+")")
	out.Reset()
	require.NoError(t, checkApprovals(&out, valid, file, false))
	assert.Contains(t, out.String(), "verified with the approvers file's passkey at https://inbox.example.com (example.com)")

	// Made for another origin: an assertion by this passkey, so it
	// verifies with the log's key alone; not where it was enrolled.
	forged := proof(approval(pk.SignFor(digest, "https://evil.example", "evil.example")))
	require.NoError(t, checkApprovals(&out, forged, nil, false))
	err = checkApprovals(&out, forged, file, false)
	require.ErrorIs(t, err, events.ErrInvalidSignature)
	assert.ErrorContains(t, err, `approval #3: INVALID_SIGNATURE: the webauthn assertion was made at origin "https://evil.example"`)
	var exit *exitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, exitAudit, exit.code)

	// A passkey the approvers file does not give the approver.
	other := testenv.NewPasskey(t, rp)
	err = checkApprovals(&out, valid, map[string]approverKey{"ann": {Name: "ann", Passkeys: []passkeyKey{{PublicKey: other.PublicKey(), RelyingParty: rp}}}}, false)
	assert.ErrorContains(t, err, "which is none of the 1 passkeys the approvers file gives ann")
	err = checkApprovals(&out, valid, map[string]approverKey{"ann": {Name: "ann", PublicKey: pk.PublicKey()}}, false)
	assert.ErrorContains(t, err, "none of the 0 passkeys", "a passkey's key given as the nkey")

	// A passkey's approval whose assertion was changed in the leaf.
	p := strings.Split(pk.Sign(digest), ".")
	authData, err := base64.RawURLEncoding.DecodeString(p[0])
	require.NoError(t, err)
	authData[36] ^= 0x80 // the counter
	p[0] = base64.RawURLEncoding.EncodeToString(authData)
	err = checkApprovals(&out, proof(approval(strings.Join(p, "."))), nil, false)
	assert.ErrorIs(t, err, events.ErrInvalidSignature)
}

// The approvers file keeps reading the form written before passkeys,
// and reads a passkey's relying party as export writes it.
func TestReadApprovers(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "old.json")
	require.NoError(t, os.WriteFile(old, []byte(`{"approvers":[{"name":"ann","public_key":"UA"}]}`), 0o644))
	got, err := readApprovers(old)
	require.NoError(t, err)
	assert.Equal(t, map[string]approverKey{"ann": {Name: "ann", PublicKey: "UA"}}, got)

	want := approversFile{Approvers: []approverKey{{Name: "ann", PublicKey: "UA", Workspaces: []string{"w"},
		Passkeys: []passkeyKey{{PublicKey: "MFk", CredentialID: "AQ", RelyingParty: events.RelyingParty{ID: "example.com", Origin: "https://inbox.example.com"}}}}}}
	b, err := json.Marshal(want)
	require.NoError(t, err)
	assert.JSONEq(t, `{"approvers":[{"name":"ann","public_key":"UA","workspaces":["w"],
		"passkeys":[{"public_key":"MFk","credential_id":"AQ","rp_id":"example.com","origin":"https://inbox.example.com"}]}]}`, string(b))
	file := filepath.Join(dir, "new.json")
	require.NoError(t, os.WriteFile(file, b, 0o644))
	got, err = readApprovers(file)
	require.NoError(t, err)
	assert.Equal(t, want.Approvers[0], got["ann"])
}

// export gives every approver principal its nkey and every inbox account
// its passkeys and workspaces, merged by name; it never makes a
// deployment's keys.
func TestApproversExport(t *testing.T) {
	data := t.TempDir()
	_, err := exportApprovers(data, nil)
	require.ErrorContains(t, err, "no deployment's principals")
	_, err = os.Stat(filepath.Join(data, authority.CredsDir))
	require.ErrorIs(t, err, os.ErrNotExist, "export made keys")

	set, err := authority.Ensure(data)
	require.NoError(t, err)
	var pub string
	for _, p := range set.Principals() {
		if p.Name == "approver" {
			pub = p.PublicKey
		}
	}
	require.NotEmpty(t, pub)
	out, err := exportApprovers(data, nil)
	require.NoError(t, err)
	assert.Equal(t, []approverKey{{Name: "approver", PublicKey: pub}}, out.Approvers)

	rp := events.RelyingParty{ID: "localhost", Origin: "http://localhost:8080"}
	pk := func(key string, id byte) approvers.Passkey {
		return approvers.Passkey{PublicKey: key, RP: rp, Credential: webauthn.Credential{ID: []byte{id}}}
	}
	out, err = exportApprovers(data, []*approvers.Account{
		{Name: "approver", Workspaces: []string{"w"}, Passkeys: []approvers.Passkey{pk("MFk", 1)}},
		{Name: "ann", Workspaces: []string{"prod", "dev"}, Passkeys: []approvers.Passkey{pk("MFa", 2), pk("MFb", 3)}},
	})
	require.NoError(t, err)
	assert.Equal(t, []approverKey{
		{Name: "approver", PublicKey: pub, Workspaces: []string{"w"}, Passkeys: []passkeyKey{{PublicKey: "MFk", CredentialID: "AQ", RelyingParty: rp}}},
		{Name: "ann", Workspaces: []string{"prod", "dev"}, Passkeys: []passkeyKey{{PublicKey: "MFa", CredentialID: "Ag", RelyingParty: rp}, {PublicKey: "MFb", CredentialID: "Aw", RelyingParty: rp}}},
	}, out.Approvers)
}
