package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/spf13/cobra"
)

// approversFile is what `approvers export` writes and `audit
// check-proof --approvers` reads: every approver and its public key.
type approversFile struct {
	Approvers []approverKey `json:"approvers"`
}

type approverKey struct {
	Name      string `json:"name"`
	PublicKey string `json:"public_key"`
}

func newApprovers(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "approvers", Short: "The approvers of the deployment and their public keys"}
	cmd.AddCommand(&cobra.Command{
		Use:   "export",
		Short: "Print every approver's public key, for audit check-proof --approvers",
		Long: `Print every approver's name and public key as JSON. An auditor checks
the signatures of approvals in a proof against this file, offline:
airlock audit check-proof PROOF --approvers FILE.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Export what exists; never make a deployment's keys here.
			if _, err := os.Stat(filepath.Join(g.data, authority.CredsDir, "principals.json")); err != nil {
				return fmt.Errorf("no deployment's principals in %s: %w; point --data at serve's data directory", g.data, err)
			}
			set, err := authority.Ensure(g.data)
			if err != nil {
				return err
			}
			out := approversFile{Approvers: []approverKey{}}
			for _, p := range set.Principals() {
				if p.Role == authority.RoleApprover {
					out.Approvers = append(out.Approvers, approverKey{Name: p.Name, PublicKey: p.PublicKey})
				}
			}
			printJSON(cmd.OutOrStdout(), out)
			return nil
		},
	})
	return cmd
}

// readApprovers reads an approvers file, name to key.
func readApprovers(path string) (map[string]string, error) {
	b, err := readLimited(path, 1<<20)
	if err != nil {
		return nil, err
	}
	var f approversFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("--approvers %s: %v (airlock approvers export writes one)", path, err)
	}
	keys := map[string]string{}
	for _, a := range f.Approvers {
		keys[a.Name] = a.PublicKey
	}
	return keys, nil
}

// checkApprovals verifies every approval in the proof: its signature with
// the key it names, which must be the key the leaf records for its actor
// and, given approvers, the key the approvers file gives that approver;
// and that its statement is the statement of that leaf's resolution. A
// grant or deny by an approver with a key but without an approval (a log
// written before approvals were signed, or a forged one) is reported as
// unsigned, and fails the check given approvers. It prints one line a
// resolution.
func checkApprovals(w io.Writer, p *audit.Proof, approvers map[string]string, quiet bool) error {
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
		key := l.Leaf.ActorKey
		if approvers != nil {
			want, ok := approvers[l.Leaf.Actor]
			if !ok {
				return &exitError{code: exitAudit, err: fmt.Errorf("approval #%d: %s is not an approver in the approvers file", l.Index, l.Leaf.Actor)}
			}
			if want != key {
				return &exitError{code: exitAudit, err: fmt.Errorf("approval #%d: signed by %s, but the approvers file gives %s the key %s", l.Index, key, l.Leaf.Actor, want)}
			}
		}
		if !quiet {
			whose := "the key the log records"
			if approvers != nil {
				whose = "the approvers file's key"
			}
			fmt.Fprintf(w, "approval #%d: %s of %s by %s at %s, args %s: signature over statement %s verified with %s (%s)\n",
				l.Index, s.Decision, s.HoldID, s.Approver, s.At, s.ArgsDigest, statement, whose, key)
		}
	}
	return nil
}
