package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/approvers"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/spf13/cobra"
)

// approversFile is what `approvers export` writes and `audit
// check-proof --approvers` reads: every approver, its public key and
// its passkeys. A file with name and public_key only (as export wrote
// it before passkeys) reads the same.
type approversFile struct {
	Approvers []approverKey `json:"approvers"`
}

// approverKey is one approver of the file.
type approverKey struct {
	Name string `json:"name"`
	// PublicKey is the nkey of the approver's credential; none for an
	// approver of the inbox alone.
	PublicKey string `json:"public_key,omitempty"`
	// Passkeys are the passkeys the approver enrolled, each with the
	// relying party it was enrolled at.
	Passkeys []passkeyKey `json:"passkeys,omitempty"`
	// Workspaces are the workspaces the approver approves in.
	Workspaces []string `json:"workspaces,omitempty"`
}

// passkeyKey is an enrolled passkey: its public key as an approval
// names it (events.AlgWebAuthn), its credential id (base64url without
// padding) and where it was enrolled (rp_id, origin).
type passkeyKey struct {
	PublicKey    string `json:"public_key"`
	CredentialID string `json:"credential_id"`
	events.RelyingParty
}

// passkey is the approver's passkey whose public key is key.
func (a approverKey) passkey(key string) (passkeyKey, bool) {
	for _, p := range a.Passkeys {
		if p.PublicKey == key {
			return p, true
		}
	}
	return passkeyKey{}, false
}

// exportApprovers makes the approvers file of the deployment in data:
// every approver principal with its nkey (it never makes keys), and
// every inbox account with the passkeys it enrolled and its workspaces,
// merged by name.
func exportApprovers(data string, accounts []*approvers.Account) (approversFile, error) {
	if _, err := os.Stat(filepath.Join(data, authority.CredsDir, "principals.json")); err != nil {
		return approversFile{}, fmt.Errorf("no deployment's principals in %s: %w; point --data at serve's data directory", data, err)
	}
	set, err := authority.Ensure(data)
	if err != nil {
		return approversFile{}, err
	}
	out := approversFile{Approvers: []approverKey{}}
	at := map[string]int{}
	for _, p := range set.Principals() {
		if p.Role == authority.RoleApprover {
			at[p.Name] = len(out.Approvers)
			out.Approvers = append(out.Approvers, approverKey{Name: p.Name, PublicKey: p.PublicKey})
		}
	}
	for _, a := range accounts {
		i, ok := at[a.Name]
		if !ok {
			i = len(out.Approvers)
			out.Approvers = append(out.Approvers, approverKey{Name: a.Name})
		}
		out.Approvers[i].Workspaces = a.Workspaces
		for _, pk := range a.Passkeys {
			out.Approvers[i].Passkeys = append(out.Approvers[i].Passkeys, passkeyKey{
				PublicKey: pk.PublicKey, CredentialID: base64.RawURLEncoding.EncodeToString(pk.Credential.ID), RelyingParty: pk.RP,
			})
		}
	}
	return out, nil
}

func newApprovers(g *globals) *cobra.Command {
	var nkeysOnly bool
	cmd := &cobra.Command{Use: "approvers", Short: "The approvers of the deployment: their keys, and the inbox's accounts"}
	export := &cobra.Command{
		Use:   "export",
		Short: "Print every approver's public key, for audit check-proof --approvers",
		Long: `Print every approver's name and public key as JSON, with the passkeys
it enrolled in the inbox (each passkey's public key, credential id, rp_id
and origin) and its workspaces. An auditor checks the signatures of
approvals in a proof against this file, offline: airlock audit
check-proof PROOF --approvers FILE. The passkeys are read from the
running deployment, as its service (run this where serve's data dir is).`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var accounts []*approvers.Account
			if !nkeysOnly {
				ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
				defer cancel()
				st, done, err := g.approverStore(ctx)
				if err != nil {
					return fmt.Errorf("the inbox's approvers: %w (or give --nkeys-only to export the approver principals' nkeys alone)", err)
				}
				defer done()
				if accounts, err = st.Accounts(ctx); err != nil {
					return err
				}
			}
			out, err := exportApprovers(g.data, accounts)
			if err != nil {
				return err
			}
			printJSON(cmd.OutOrStdout(), out)
			return nil
		},
	}
	export.Flags().BoolVar(&nkeysOnly, "nkeys-only", false, "export the approver principals' nkeys alone, without the inbox's passkeys (no connection)")
	cmd.AddCommand(export, newApproversAdd(g), newApproversList(g), newApproversRemove(g))
	return cmd
}

// readApprovers reads an approvers file, name to approver.
func readApprovers(path string) (map[string]approverKey, error) {
	b, err := readLimited(path, 1<<20)
	if err != nil {
		return nil, err
	}
	var f approversFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("--approvers %s: %v (airlock approvers export writes one)", path, err)
	}
	approvers := map[string]approverKey{}
	for _, a := range f.Approvers {
		approvers[a.Name] = a
	}
	return approvers, nil
}

// checkApprovals verifies every approval in the proof: its signature with
// the key it names, which must be the key the leaf records for its actor
// and, given approvers, the key the approvers file gives that approver
// (for a passkey's, one of its passkeys, whose relying party the
// assertion must be made at); and that its statement is the statement of
// that leaf's resolution. A grant or deny by an approver with a key but
// without an approval (a log written before approvals were signed, or a
// forged one) is reported as unsigned, and fails the check given
// approvers. It prints one line a resolution.
func checkApprovals(w io.Writer, p *audit.Proof, approvers map[string]approverKey, quiet bool) error {
	for _, l := range p.Leaves {
		if !l.Leaf.Resolution() && l.Leaf.Approval == "" {
			continue
		}
		if l.Leaf.Approval == "" {
			if l.Leaf.ActorKey == "" {
				continue // --no-auth: nobody signs
			}
			if approvers != nil {
				return &exitError{code: exitAudit, err: fmt.Errorf("resolution #%d by %s carries no signed approval", l.Index, l.Leaf.Actor)}
			}
			if !quiet {
				fmt.Fprintf(w, "resolution #%d by %s: UNSIGNED (no approval in the log; with --approvers this fails)\n", l.Index, l.Leaf.Actor)
			}
			continue
		}
		s, statement, err := l.Leaf.VerifyApproval()
		if err != nil {
			return &exitError{code: exitAudit, err: err}
		}
		a, err := l.Leaf.ParseApproval()
		if err != nil {
			return &exitError{code: exitAudit, err: err}
		}
		alg, key := a.Signature.Alg, a.Signature.Key
		whose := "the key the log records"
		if approvers != nil {
			if whose, err = checkApproverKey(l.Index, l.Leaf.Actor, a.Signature, approvers); err != nil {
				return &exitError{code: exitAudit, err: err}
			}
		}
		if !quiet {
			fmt.Fprintf(w, "approval #%d: %s of %s by %s at %s, args %s: %s signature over statement %s verified with %s (%s)\n",
				l.Index, s.Decision, s.HoldID, s.Approver, s.At, s.ArgsDigest, alg, statement, whose, key)
		}
	}
	return nil
}

// checkApproverKey checks that sig, a verified approval of leaf index by
// actor, is by a key the approvers file gives actor: its nkey or, for a
// passkey's, one of its passkeys, at whose relying party the assertion
// was made. It says whose key it was.
func checkApproverKey(index int64, actor string, sig events.ApprovalSignature, approvers map[string]approverKey) (string, error) {
	want, ok := approvers[actor]
	if !ok {
		return "", fmt.Errorf("approval #%d: %s is not an approver in the approvers file", index, actor)
	}
	if sig.Alg != events.AlgWebAuthn {
		if want.PublicKey != sig.Key {
			return "", fmt.Errorf("approval #%d: signed by %s, but the approvers file gives %s the key %s", index, sig.Key, actor, want.PublicKey)
		}
		return "the approvers file's key", nil
	}
	pk, ok := want.passkey(sig.Key)
	if !ok {
		return "", fmt.Errorf("approval #%d: signed by the passkey %s, which is none of the %d passkeys the approvers file gives %s", index, sig.Key, len(want.Passkeys), actor)
	}
	if err := events.VerifyWebAuthnRelyingParty(sig.Sig, pk.RelyingParty); err != nil {
		return "", fmt.Errorf("approval #%d: %w", index, err)
	}
	return fmt.Sprintf("the approvers file's passkey at %s (%s)", pk.Origin, pk.ID), nil
}
