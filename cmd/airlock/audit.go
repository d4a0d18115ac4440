package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/progress"
	"github.com/airlock-dev/airlock/consumers/projector"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/natsrv"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/producers"
	"github.com/cockroachdb/pebble/v2"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"
)

// exitAudit is the exit code of a log that fails verification, a proof
// that does not check, and a serve refused for its audit log.
const exitAudit = 5

func newAudit(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "audit", Short: "Verify the tamper-evident audit log and prove what happened to an op"}
	cmd.AddCommand(newAuditVerify(g), newAuditProve(g), newAuditCheckProof(g))
	return cmd
}

// auditSource opens the log: the data dir's store, or the server's
// queries when remote is set or a running server holds the store.
func (g *globals) auditSource(ctx context.Context, remote bool) (src audit.Source, proofs projector.ProofStore, aud *producers.Auditor, done func(), err error) {
	if !remote {
		st, err := store.OpenReadOnly(filepath.Join(g.data, app.StoreDir))
		switch {
		case err == nil:
			return st, st, nil, func() { st.Close() }, nil
		case !locked(err):
			return nil, nil, nil, nil, fmt.Errorf("audit log in %s: %w (use --remote to ask a server)", g.data, err)
		}
		fmt.Fprintf(os.Stderr, "airlock: %s is in use by a running server; asking it at %s\n", g.data, g.server)
	}
	nc, err := g.connect(string(authority.RoleAuditor))
	if err != nil {
		return nil, nil, nil, nil, err
	}
	aud = producers.NewAuditor(nc)
	return remoteLog(ctx, aud), nil, aud, nc.Close, nil
}

func locked(err error) bool {
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK) ||
		strings.Contains(err.Error(), "resource temporarily unavailable") || strings.Contains(err.Error(), "lock held")
}

// verifierKey reads --key, or the data dir's audit.pub.
func (g *globals) verifierKey(path string) (note.Verifier, error) {
	if path == "" {
		path = filepath.Join(g.data, audit.PubFile)
	}
	return audit.ReadVerifier(path)
}

func newAuditVerify(g *globals) *cobra.Command {
	var (
		keyPath, trustedPath, savePath string
		asJSON, remote, fromJetStream  bool
	)
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Recompute the audit log's tree and check every hash and checkpoint",
		Long: `Verify recomputes the Merkle tree from every leaf (with two independent
implementations), checks every stored hash, every checkpoint's signature and
root, and that the log neither rolled back from nor forked off the trusted
checkpoint. It reads a data dir (a copy is fine) or, with --remote or when a
running server holds the data dir, the server's leaves.

Exit 0 when sound, 5 with the status (LEAF_MISMATCH, HASH_MISMATCH,
ROOT_MISMATCH, BAD_SIGNATURE, ROLLBACK, FORK, INDEX_MISMATCH) and its
index otherwise.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Storage or a key that cannot be read is a finding, not a
			// failure to run: CORRUPT, exit 5, naming the file.
			unreadable := func(err error) error {
				rep := audit.UnreadableReport(err)
				if asJSON {
					printJSON(cmd.OutOrStdout(), rep)
				} else {
					printReport(cmd.OutOrStdout(), rep, 0)
				}
				return &exitError{code: exitAudit}
			}
			v, err := g.verifierKey(keyPath)
			if errors.Is(err, audit.ErrUnreadable) {
				return unreadable(err)
			}
			if err != nil {
				return err
			}
			var trusted []audit.Trusted
			if trustedPath != "" {
				b, err := readLimited(trustedPath, audit.MaxCheckpointBytes)
				if err != nil {
					return err
				}
				trusted = append(trusted, audit.Trusted{Name: "trusted", Note: b})
			}
			src, _, _, done, err := g.auditSource(cmd.Context(), remote)
			if errors.Is(err, audit.ErrUnreadable) {
				return unreadable(err)
			}
			if err != nil {
				return err
			}
			defer done()
			// Offline, every block of every table: a flipped byte in one
			// that no scan of the log reads is found too.
			if st, ok := src.(*store.Store); ok {
				// And the embedded server's stream files: every record's
				// checksum, which nats-server checks only when it loads a
				// block (a message already projected is not loaded again).
				// Read beside the tables: the two share nothing.
				blocks := make(chan error, 1)
				go func() {
					_, err := natsrv.CheckBlocks(filepath.Join(g.data, natsrv.StoreDir), false, streams.WrittenByAirlock)
					blocks <- err
				}()
				tablesErr := st.CheckTables(cmd.Context())
				blocksErr := <-blocks
				if tablesErr != nil {
					return unreadable(tablesErr)
				}
				if blocksErr != nil {
					return unreadable(fmt.Errorf("%w: %v", audit.ErrUnreadable, blocksErr))
				}
			}
			if !remote {
				file, err := audit.CheckpointFileTrusted(g.data)
				if err != nil {
					return err
				}
				trusted = append(trusted, file...)
			}
			// JetStream's checkpoints are an anchor by default: when the
			// deployment answers, they are checked; when it does not, the
			// report says so. Asked for with the flag, they must be.
			var skipped []string
			if fromJetStream {
				size, err := src.LogSize()
				if err != nil && !errors.Is(err, pebble.ErrNotFound) {
					return err
				}
				kept, err := g.jetstreamCheckpoints(cmd.Context(), v.Name(), size, remote)
				switch {
				case err == nil:
					trusted = append(trusted, kept...)
				case cmd.Flags().Changed("jetstream-checkpoint"):
					return err
				default:
					skipped = append(skipped, "jetstream: "+firstLine(err.Error()))
				}
			}
			opts := audit.Options{Verifier: v, Trusted: trusted}
			var bar *progress.Reporter // nil: not a terminal, or --json
			if progress.Enabled(os.Stderr, asJSON) {
				bar = progress.New(os.Stderr, "verify", 0)
				opts.Progress = func(done, total int64) { bar.SetTotal(total); bar.Set(done) }
			}
			start := time.Now()
			rep, err := audit.Verify(src, opts)
			bar.Finish()
			if err != nil {
				return err
			}
			took := time.Since(start)
			w := cmd.OutOrStdout()
			if asJSON {
				printJSON(w, struct {
					*audit.Report
					Unchecked []string `json:"anchors_unchecked,omitempty"`
				}{rep, skipped})
			} else {
				printReport(w, rep, took)
				for _, s := range skipped {
					fmt.Fprintf(w, "unchecked:   %s\n", s)
				}
			}
			if !rep.OK() {
				return &exitError{code: exitAudit}
			}
			if savePath != "" && rep.Latest != nil {
				if err := os.WriteFile(savePath, rep.Latest, 0o644); err != nil {
					return err
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&keyPath, "key", "", "verifier key file (default <data>/audit.pub)")
	f.StringVar(&trustedPath, "trusted-checkpoint", "", "a checkpoint kept elsewhere that the log must contain")
	f.StringVar(&savePath, "save-checkpoint", "", "when the log is sound, write its newest checkpoint here (the next run's --trusted-checkpoint)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	f.BoolVar(&remote, "remote", false, "read the log from the server at --server instead of the data dir")
	f.BoolVar(&fromJetStream, "jetstream-checkpoint", true, "also check against the checkpoints JetStream keeps for this log (at --server): this data dir's newest, and the deployment's when the log reaches it; by default when the server answers (the report says when it did not), =false never")
	return cmd
}

// jetstreamCheckpoints reads the checkpoints JetStream keeps for the log
// of origin, as a start of serve checks them (projector.Checkpoints): the
// data dir's own newest, which a log of size leaves may not be behind, and
// the deployment's newest when the log reaches it (a copy behind the
// deployment is not rolled back). Remote, the log is whichever
// instance's answers, and only the deployment's newest is read.
func (g *globals) jetstreamCheckpoints(ctx context.Context, origin string, size int64, remote bool) ([]audit.Trusted, error) {
	nc, err := g.connect(string(authority.RoleAuditor))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, streams.AuditBucket)
	if err != nil {
		return nil, fmt.Errorf("audit bucket: %w", err)
	}
	get := func(key string) ([]byte, error) {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("audit bucket: %w", err)
		}
		return e.Value(), nil
	}
	var out []audit.Trusted
	if !remote {
		if b, err := os.ReadFile(filepath.Join(g.data, app.InstanceFile)); err == nil {
			own, err := get(streams.AuditInstanceKey(origin, strings.TrimSpace(string(b))))
			if err != nil {
				return nil, err
			}
			if own != nil {
				out = append(out, audit.Trusted{Name: "jetstream (this data dir's newest)", Note: own})
			}
		}
	}
	shared, err := get(streams.AuditCheckpointKey(origin))
	if err != nil || shared == nil {
		return out, err
	}
	// A data dir with no checkpoint of its own in the bucket was written
	// before instances had one: the deployment's was its own.
	if audit.PeekSize(shared) <= size || (!remote && len(out) == 0) {
		out = append(out, audit.Trusted{Name: "jetstream (the deployment's newest)", Note: shared})
	}
	return out, nil
}

func printReport(w io.Writer, r *audit.Report, took time.Duration) {
	fmt.Fprintf(w, "status:      %s\n", r.Status)
	fmt.Fprintf(w, "origin:      %s\n", r.Origin)
	fmt.Fprintf(w, "size:        %d\n", r.Size)
	if r.Root != "" {
		fmt.Fprintf(w, "root:        %s\n", r.Root)
	}
	fmt.Fprintf(w, "checked:     %d leaves, %d stored hashes, %d checkpoints (newest at %d)\n", r.Leaves, r.Hashes, r.Checkpoints, r.CheckpointSize)
	fmt.Fprintf(w, "anchors:     %s\n", strings.Join(r.Anchors, "; "))
	if secs := took.Seconds(); secs > 0 && r.Leaves > 0 {
		fmt.Fprintf(w, "rate:        %.0f leaves/s\n", float64(r.Leaves)/secs)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "problem:     %s\n", p)
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return b, nil
}

func newAuditProve(g *globals) *cobra.Command {
	var (
		out    string
		remote bool
		wait   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "prove OP_ID",
		Short: "Write a self-contained proof of an op's events (check it with check-proof)",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !events.ValidOpID(args[0]) {
				return usageError("%q is not an op id (op_<32 hex>)", args[0])
			}
			_, proofs, aud, done, err := g.auditSource(cmd.Context(), remote)
			if err != nil {
				return err
			}
			defer done()
			var file []byte
			if aud != nil {
				ctx, cancel := context.WithTimeout(cmd.Context(), wait)
				defer cancel()
				file, err = aud.Proof(ctx, args[0])
			} else {
				var v note.Verifier
				if v, err = g.verifierKey(""); err == nil {
					file, err = projector.BuildProof(proofs, v, args[0])
				}
			}
			if err != nil {
				return err
			}
			if out == "" || out == "-" {
				_, err = cmd.OutOrStdout().Write(file)
				return err
			}
			return os.WriteFile(out, file, 0o644)
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "write the proof to this file (default stdout)")
	cmd.Flags().BoolVar(&remote, "remote", false, "ask the server at --server instead of reading the data dir")
	cmd.Flags().DurationVar(&wait, "wait", 10*time.Second, "how long to wait for the op's newest events to be under a checkpoint")
	return cmd
}

func newAuditCheckProof(g *globals) *cobra.Command {
	var (
		keyPath       string
		asJSON        bool
		resultPath    string
		approversPath string
	)
	cmd := &cobra.Command{
		Use:   "check-proof FILE [--result RESULT] [--approvers FILE]",
		Short: "Check an op proof with the verifier key and nothing else",
		Long: `Check an op proof with the verifier key and nothing else.

With --result, also check that RESULT (a file, - for stdin: the result an
agent got, as airlock ops result printed it) is the result the op
produced: its digest, over the compacted JSON, is the result_digest of
the proof's completed event.

Every approval in the proof (a grant or deny signed by its approver's
nkey or passkey) is verified: its signature over the statement's digest,
with the key the log records for the approver; with --approvers (the
output of airlock approvers export), with the key that file gives the
approver, and for a passkey's, made at the origin the passkey was
enrolled at.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if keyPath == "" {
				keyPath = filepath.Join(g.data, audit.PubFile)
				if _, err := os.Stat(keyPath); errors.Is(err, os.ErrNotExist) {
					return usageError("no verifier key: %s does not exist; pass --key FILE (the log's audit.pub) or --data DIR that holds it", keyPath)
				}
			}
			v, err := audit.ReadVerifier(keyPath)
			if err != nil {
				return err
			}
			file, err := readLimited(args[0], audit.MaxProofBytes)
			if err != nil {
				return err
			}
			p, err := audit.CheckProof(file, v)
			if err != nil {
				return &exitError{code: exitAudit, err: err}
			}
			var approvers map[string]approverKey
			if approversPath != "" {
				if approvers, err = readApprovers(approversPath); err != nil {
					return err
				}
			}
			if err := checkApprovals(cmd.OutOrStdout(), p, approvers, asJSON); err != nil {
				return err
			}
			if resultPath != "" {
				if err := checkResult(cmd.InOrStdin(), resultPath, p); err != nil {
					return err
				}
				if !asJSON {
					fmt.Fprintf(cmd.OutOrStdout(), "result %s matches the op's completed event\n", resultPath)
				}
			}
			return printProof(cmd.OutOrStdout(), p, asJSON)
		},
	}
	cmd.Flags().StringVar(&resultPath, "result", "", "also check this result (a file, - for stdin) against the proven completed event's result_digest")
	cmd.Flags().StringVar(&approversPath, "approvers", "", "check each approval's key against this file (airlock approvers export)")
	cmd.Flags().StringVar(&keyPath, "key", "", "verifier key file (default <data>/audit.pub)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

// checkResult checks the result at path against the result digest of the
// proof's completed event.
func checkResult(stdin io.Reader, path string, p *audit.Proof) error {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(io.LimitReader(stdin, events.MaxResultBytes+1))
	} else {
		b, err = readLimited(path, events.MaxResultBytes*2)
	}
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, bytes.TrimSpace(b)); err != nil {
		return &exitError{code: exitAudit, err: fmt.Errorf("--result %s is not JSON: %v", path, err)}
	}
	want := ""
	for _, l := range p.Leaves {
		if l.Leaf.Type == string(events.TypeCompleted) {
			want = l.Leaf.Result
		}
	}
	if want == "" {
		return &exitError{code: exitAudit, err: fmt.Errorf("the proof of %s has no completed event: there is no result to check", p.Op)}
	}
	if got := events.Digest(buf.Bytes()); got != want {
		return &exitError{code: exitAudit, err: fmt.Errorf("--result %s has digest %s; the op's completed event recorded %s: not the op's result", path, got, want)}
	}
	return nil
}

type provenJSON struct {
	Status     string        `json:"status"`
	Op         string        `json:"op_id"`
	Origin     string        `json:"origin"`
	Size       int64         `json:"size"`
	Root       string        `json:"root"`
	Leaves     []provenEvent `json:"leaves"`
	Checkpoint string        `json:"checkpoint"`
}

type provenEvent struct {
	Index int64 `json:"index"`
	*audit.Leaf
}

func printProof(w io.Writer, p *audit.Proof, asJSON bool) error {
	c := p.Checkpoint
	if asJSON {
		out := provenJSON{Status: "OK", Op: p.Op, Origin: c.Origin, Size: c.Size, Root: c.Root.String(), Checkpoint: string(c.Note)}
		for _, l := range p.Leaves {
			out.Leaves = append(out.Leaves, provenEvent{Index: l.Index, Leaf: l.Leaf})
		}
		printJSON(w, out)
		return nil
	}
	fmt.Fprintf(w, "OK: %d events of %s are in the log %s of %d leaves (root %s)\n", len(p.Leaves), p.Op, c.Origin, c.Size, c.Root)
	for _, l := range p.Leaves {
		e := l.Leaf
		typ := events.Type(e.Type).Short()
		fmt.Fprintf(w, "  #%-8d seq %-8d %-10s %s", l.Index, e.Seq, typ, e.Time)
		for _, kv := range [][2]string{{"hold", e.Hold}, {"actor", e.Actor}, {"key", e.ActorKey}, {"policy", e.Policy},
			{"args", e.Args}, {"result", e.Result}, {"code", e.Code}, {"approval", approvalShort(e.Approval)}} {
			if kv[1] != "" {
				fmt.Fprintf(w, " %s=%s", kv[0], kv[1])
			}
		}
		fmt.Fprintln(w)
	}
	return nil
}

// approvalShort says whether a leaf carries an approval.
func approvalShort(a string) string {
	if a == "" {
		return ""
	}
	return "signed"
}
