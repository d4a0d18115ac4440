package patch

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/failpoint"
)

// ledger is what an attempt meant to do, written before any file is: each
// file's pre-image and intended post-image hash. One file per op; a new
// attempt overwrites it.
type ledger struct {
	Op      string `json:"op"`
	Attempt string `json:"attempt"`
	Files   []File `json:"files"`
}

// errTornLedger marks a ledger that exists but does not decode.
var errTornLedger = errors.New("apply_patch: ledger does not decode")

// writeLedger durably stores l as LedgerDir/<op>.json.
func (p *Patch) writeLedger(l ledger) error {
	b, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("apply_patch: ledger: %w", err)
	}
	dir, err := os.OpenRoot(p.ledger)
	if err != nil {
		return fmt.Errorf("apply_patch: ledger: %w", err)
	}
	defer dir.Close()
	if err := writeIn(dir, l.Op+".json", b, 0o600); err != nil {
		return fmt.Errorf("apply_patch: ledger: %w", err)
	}
	return nil
}

// readLedger reads the ledger of op: fs.ErrNotExist when there is none,
// errTornLedger when it does not decode.
func (p *Patch) readLedger(op string) (ledger, error) {
	var l ledger
	if !safeOpID(op) {
		return l, fmt.Errorf("apply_patch: op id %q cannot name a ledger file", op)
	}
	b, err := os.ReadFile(path.Join(p.ledger, op+".json"))
	if err != nil {
		return l, fmt.Errorf("apply_patch: ledger: %w", err)
	}
	if err := json.Unmarshal(b, &l); err != nil || l.Op != op {
		return l, fmt.Errorf("%w: %s", errTornLedger, op)
	}
	return l, nil
}

// write replaces the targets one by one, each atomically. If one fails,
// the ones before it are put back; if that fails too, the error is
// EXECUTION_AMBIGUOUS and names what each file holds.
func (p *Patch) write(root *os.Root, ts []target) error {
	for i := range ts {
		if i > 0 {
			failpoint.Hit(failpoint.PatchBetweenFiles, ToolName)
		}
		if err := p.put(root, &ts[i]); err != nil {
			return p.undo(root, ts[:i+1], fmt.Errorf("apply_patch: write %s: %w", ts[i].diff.ref(), pathless(err)))
		}
	}
	failpoint.Hit(failpoint.AfterEffect, ToolName)
	return nil
}

// put writes one target's post-image.
func put(root *os.Root, t *target) error {
	name := t.diff.path
	switch t.diff.action {
	case ActionDelete:
		if err := root.Remove(name); err != nil {
			return err
		}
		return syncDir(root, path.Dir(name))
	case ActionAdd:
		if err := mkdirs(root, path.Dir(name)); err != nil {
			return err
		}
	}
	return writeIn(root, name, t.post, t.mode)
}

// undo puts the pre-images of ts back, last first, after cause.
func (p *Patch) undo(root *os.Root, ts []target, cause error) error {
	var failed []string
	for i := len(ts) - 1; i >= 0; i-- {
		t := &ts[i]
		var err error
		if t.exists {
			err = writeIn(root, t.diff.path, t.pre, t.mode)
		} else if err = root.Remove(t.diff.path); errors.Is(err, fs.ErrNotExist) {
			err = nil
		} else if err == nil {
			err = syncDir(root, path.Dir(t.diff.path))
		}
		if err != nil {
			failed = append(failed, t.diff.ref())
			p.cfg.Logger.Warn("apply_patch: restoring a file failed", "file", t.diff.ref(), "err", pathless(err))
		}
	}
	if len(failed) > 0 {
		return events.Errorf(events.CodeAmbiguous, "%v; restoring the pre-image failed for %s, which may hold the post-image",
			cause, strings.Join(failed, ", "))
	}
	return fmt.Errorf("%w; every file was restored to its pre-image", cause)
}

// writeIn replaces name under root with data, atomically and durably: a
// temp file in the same directory, fsynced, renamed over name, and the
// directory fsynced. The file gets mode exactly.
func writeIn(root *os.Root, name string, data []byte, mode fs.FileMode) (err error) {
	dir := path.Dir(name)
	tmp := path.Join(dir, ".airlock-"+rand.Text()+".tmp")
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = root.Remove(tmp)
		}
	}()
	if err = f.Chmod(mode.Perm()); err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err = root.Rename(tmp, name); err != nil {
		return err
	}
	return syncDir(root, dir)
}

// mkdirs creates the missing directories of dir (0755), fsyncing each
// parent. inspect has checked that the existing ones are directories.
func mkdirs(root *os.Root, dir string) error {
	if dir == "." {
		return nil
	}
	parts := strings.Split(dir, "/")
	for i := range parts {
		d := strings.Join(parts[:i+1], "/")
		err := root.Mkdir(d, 0o755)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := syncDir(root, path.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}

// syncDir fsyncs directory dir under root.
func syncDir(root *os.Root, dir string) error {
	d, err := root.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Forget removes the op's ledger: the runner calls it once the op's
// terminal event is stored, when no recovery can ask about it again.
func (p *Patch) Forget(_ context.Context, opID string) error {
	if !safeOpID(opID) {
		return fmt.Errorf("apply_patch: op id %q cannot name a ledger file", opID)
	}
	err := os.Remove(path.Join(p.ledger, opID+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Kept lists the ops with a ledger.
func (p *Patch) Kept(context.Context) ([]string, error) {
	entries, err := os.ReadDir(p.ledger)
	if err != nil {
		return nil, fmt.Errorf("apply_patch: ledger: %w", err)
	}
	var ops []string
	for _, e := range entries {
		if op, ok := strings.CutSuffix(e.Name(), ".json"); ok && e.Type().IsRegular() && safeOpID(op) {
			ops = append(ops, op)
		}
	}
	return ops, nil
}

var _ executor.Keeper = (*Patch)(nil)
