package bench

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/store"
)

// auditLog measures the log alone: appending cfg.AuditLeaves leaves shaped
// like real ones to a fresh store in the projector's batches (a leaf per
// event, a checkpoint per batch of 1024) and verifying them all.
func auditLog(cfg Config, res *Result) error {
	dir := filepath.Join(cfg.Dir, "audit")
	key, _, err := audit.LoadOrCreateKey(dir)
	if err != nil {
		return err
	}
	st, err := store.Open(filepath.Join(dir, "projection"))
	if err != nil {
		return err
	}
	defer func() { st.Close() }()
	const batch = 1024
	at := time.Now()
	m := cfg.track(PhaseAuditAppend, cfg.AuditLeaves)
	defer m.end()
	start := time.Now()
	for i := 0; i < cfg.AuditLeaves; i += batch {
		b := st.NewBatch()
		for j := i; j < min(i+batch, cfg.AuditLeaves); j++ {
			op := fmt.Sprintf("op_%032x", j/4)
			d := &events.Completed{OpHeader: events.OpHeader{OpID: op, Workspace: "bench"}, Attempt: "a1",
				ResultDigest: events.Digest([]byte(op))}
			l := audit.NewLeaf("AIRLOCK_OPS", events.OpEventSubject("bench", op, "echo", events.TypeCompleted), uint64(j+1), at,
				events.TypeCompleted, op, "airlock/executor", at.Format(time.RFC3339Nano), []byte(op), d)
			if err := b.AppendLeaf(l.Encode(), l.Op); err != nil {
				return err
			}
		}
		b.SetApplied(uint64(min(i+batch, cfg.AuditLeaves)))
		if _, err := b.Checkpoint(key); err != nil {
			return err
		}
		if err := b.Commit(false); err != nil {
			return err
		}
		m.set(int64(min(i+batch, cfg.AuditLeaves)))
	}
	took := time.Since(start)
	m.end()
	res.AuditLeaves = cfg.AuditLeaves
	res.AuditAppendNS = float64(took.Nanoseconds()) / float64(cfg.AuditLeaves)
	// Verified as `airlock audit verify` reads a data dir: opened
	// read-only, after the writer closed it.
	if err := st.Close(); err != nil {
		return err
	}
	if st, err = store.OpenReadOnly(filepath.Join(dir, "projection")); err != nil {
		return err
	}
	vm := cfg.track(PhaseAuditVerify, cfg.AuditLeaves)
	defer vm.end()
	start = time.Now()
	rep, err := audit.Verify(st, audit.Options{Verifier: key.Verifier, Progress: func(done, _ int64) { vm.set(done) }})
	if err != nil {
		return err
	}
	if !rep.OK() {
		return fmt.Errorf("the benchmark's log does not verify: %v", rep.Problems)
	}
	res.AuditVerifyPerS = float64(rep.Leaves) / time.Since(start).Seconds()
	vm.end()
	return nil
}
