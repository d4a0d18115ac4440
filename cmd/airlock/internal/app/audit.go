package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-dev/airlock/consumers/projector"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/cockroachdb/pebble/v2"
)

// StoreDir is the projection's Pebble store (with the audit log) under the
// data dir.
const StoreDir = "projection"

// AuditError is a start refused because the audit log failed verification.
type AuditError struct{ Report *audit.Report }

func (e *AuditError) Error() string {
	msg := fmt.Sprintf("audit log failed verification: %s", e.Report.Status)
	if len(e.Report.Problems) > 0 {
		msg = "audit log failed verification: " + e.Report.Problems[0].String()
	}
	return msg + " (run `airlock audit verify` for the whole report; --unsafe-audit-override starts anyway)"
}

// firstAuditKey makes the audit key of a data dir that has neither a key
// nor a projection: a first start.
func firstAuditKey(dir string, log *slog.Logger) error {
	for _, name := range []string{audit.KeyFile, audit.PubFile, StoreDir} {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, fs.ErrNotExist) {
			return nil
		}
	}
	key, created, err := audit.LoadOrCreateKey(dir)
	if err != nil {
		return err
	}
	if created {
		log.Info("audit key created", "origin", key.Origin, "verifier", key.Public)
	}
	return nil
}

// checkAuditLog loads (or creates) the audit key and verifies the whole log
// against its own checkpoints and the one kept in JetStream before anything
// is appended to it.
func (a *App) checkAuditLog(ctx context.Context, cfg Config) (*projector.Checkpoints, error) {
	key, created, err := audit.LoadOrCreateKey(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	a.AuditKey = key
	if created {
		// A new key over a log signed with another is not a new log: the
		// old key was lost or removed, and every checkpoint would fail.
		if size, err := a.Store.LogSize(); err != nil || size > 0 {
			return nil, fmt.Errorf("audit key: %s holds an audit log but no key (%s, %s): restore them; a new key would orphan every checkpoint", cfg.DataDir, audit.KeyFile, audit.PubFile)
		}
		cfg.Logger.Info("audit key created", "origin", key.Origin, "verifier", key.Public)
	}
	var (
		checkpoints *projector.Checkpoints
		found       *projector.Found
	)
	if err := streams.Await(ctx, cfg.Logger, "the audit bucket", func(ctx context.Context) error {
		checkpoints, found, err = projector.OpenCheckpoints(ctx, a.JetStream, key, a.Instance)
		return err
	}); err != nil {
		return nil, err
	}
	size, err := a.Store.LogSize()
	if err != nil && !errors.Is(err, pebble.ErrNotFound) {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	trusted, err := checkpoints.Trusted(found, size)
	if err != nil {
		return nil, err
	}
	file, err := audit.CheckpointFileTrusted(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	trusted = append(trusted, file...)
	start := time.Now()
	if a.walk == nil {
		// No key when the store opened: a first start, whose key was
		// made just now.
		a.walk = walkAuditLog(cfg.DataDir, a.Store)
	}
	w := a.walk.result()
	if w == nil {
		return nil, fmt.Errorf("audit log: the audit key in %s cannot be read", cfg.DataDir)
	}
	if w.err != nil {
		return nil, fmt.Errorf("audit log: %w", w.err)
	}
	// The walk checked the log against its own checkpoints; what is left
	// is JetStream's and the file's.
	rep, took := w.rep, w.took
	audit.CheckTrusted(a.Store, rep, audit.Options{Verifier: key.Verifier}, trusted)
	a.AuditReport = rep
	if rep.OK() {
		cfg.Logger.Info("audit log verified", "size", rep.Size, "root", rep.Root,
			"checkpoint", rep.CheckpointSize, "anchors", rep.Anchors, "took", took.Round(time.Millisecond),
			"waited", time.Since(start).Round(time.Millisecond))
		return checkpoints, nil
	}
	if !cfg.AuditOverride {
		return nil, &AuditError{Report: rep}
	}
	for _, p := range rep.Problems {
		cfg.Logger.Error("AUDIT LOG FAILED VERIFICATION; STARTING ANYWAY (--unsafe-audit-override)",
			"status", p.Status, "index", p.Index, "detail", p.Detail)
	}
	// The checkpoint in JetStream is not one this log extends: leave it
	// for whoever investigates instead of replacing it.
	return nil, nil
}

// logWalk is the audit log's walk begun as the store opens, before the
// server starts: on a million events it takes about a second, which the
// stream blocks' check and the server's recovery of its streams then
// hide.
type logWalk struct {
	done chan struct{}
	rep  *audit.Report
	err  error
	took time.Duration
}

// walkAuditLog walks the log of a data dir that has its audit key (nil
// without one: checkAuditLog makes or reports it, then walks), against
// the log's own checkpoints.
func walkAuditLog(dir string, st *store.Store) *logWalk {
	key, err := audit.LoadKey(dir)
	if err != nil {
		return nil
	}
	w := &logWalk{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		start := time.Now()
		w.rep, w.err = audit.Verify(st, audit.Options{Verifier: key.Verifier})
		w.took = time.Since(start)
	}()
	return w
}

// wait waits for the walk to end; nil waits for nothing.
func (w *logWalk) wait() {
	if w != nil {
		<-w.done
	}
}

// result waits for the walk and returns it; nil when there was none.
func (w *logWalk) result() *logWalk {
	w.wait()
	return w
}
