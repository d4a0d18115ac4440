package command

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/consumers/executor"
)

// The ledger is one directory per op under LedgerDir holding, per attempt,
// <attempt>.started and <attempt>.done.
//
// .started is created exclusively (O_EXCL), written, fsynced, and its
// directory fsynced before the process is spawned. Its existence is what
// counts: a crash can leave it torn, which reads as started all the same.
// Once the process is spawned it is replaced (temporary file and rename,
// no fsync) by a copy with the pid; a crash that loses the copy loses
// only the pid.
//
// .done is written whole to a temporary name, fsynced, renamed and its
// directory fsynced after the process exited, so a crash leaves either the
// whole result or none.

// started is the content of <attempt>.started.
type started struct {
	Attempt    string    `json:"attempt"`
	ArgvSHA256 string    `json:"argv_sha256"`
	StartedAt  time.Time `json:"started_at"`
	// PID is 0 until the process is spawned; the record is rewritten with
	// it afterwards.
	PID int `json:"pid,omitempty"`
}

// errStartedExists: the attempt has a started record already.
var errStartedExists = errors.New("attempt already started")

type ledger struct{ dir string }

// validName accepts op and attempt ids as single path elements.
func validName(s string) bool {
	return s != "" && len(s) <= 200 && !strings.HasPrefix(s, ".") &&
		!strings.ContainsAny(s, "/\\\x00")
}

func (l ledger) opDir(op string) (string, error) {
	if !validName(op) {
		return "", fmt.Errorf("exec ledger: op id %q is not a file name", op)
	}
	return filepath.Join(l.dir, op), nil
}

func (l ledger) path(op, attempt, suffix string) (string, error) {
	d, err := l.opDir(op)
	if err != nil {
		return "", err
	}
	if !validName(attempt) {
		return "", fmt.Errorf("exec ledger: attempt id %q is not a file name", attempt)
	}
	return filepath.Join(d, attempt+suffix), nil
}

// begin durably records that op's attempt is about to spawn argv. It
// fails with errStartedExists if the attempt has a record already.
func (l ledger) begin(op, attempt string, argv []string, at time.Time) (string, started, error) {
	rec := started{Attempt: attempt, ArgvSHA256: argvDigest(argv), StartedAt: at.UTC()}
	p, err := l.path(op, attempt, ".started")
	if err != nil {
		return "", rec, err
	}
	if err := l.mkOpDir(filepath.Dir(p)); err != nil {
		return "", rec, err
	}
	b, _ := json.Marshal(rec)
	return p, rec, createDurable(p, b)
}

// spawned replaces the started record by one with the pid, without
// fsync: a crash loses at most the pid (or tears the record, which still
// reads as started).
func (l ledger) spawned(p string, rec started) error {
	b, _ := json.Marshal(rec)
	return replace(p, b, false)
}

// abandon durably removes a started record whose process never spawned.
func (l ledger) abandon(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return syncDir(filepath.Dir(p))
}

// finish durably records the result of op's attempt.
func (l ledger) finish(op, attempt string, result []byte) error {
	p, err := l.path(op, attempt, ".done")
	if err != nil {
		return err
	}
	if err := replace(p, result, true); err != nil {
		return err
	}
	return syncDir(filepath.Dir(p))
}

func (l ledger) mkOpDir(d string) error {
	err := os.Mkdir(d, 0o700)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("exec ledger: %w", err)
	}
	return syncDir(l.dir)
}

// createDurable creates p, failing with errStartedExists if it exists,
// writes b, and fsyncs it and its directory.
func createDurable(p string, b []byte) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return errStartedExists
	}
	if err != nil {
		return fmt.Errorf("exec ledger: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("exec ledger: write %s: %w", p, err)
	}
	return syncDir(filepath.Dir(p))
}

// replace writes b to a temporary file beside p, fsyncs it if sync, and
// renames it to p.
func replace(p string, b []byte, sync bool) error {
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".tmp-*")
	if err != nil {
		return fmt.Errorf("exec ledger: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("exec ledger: write %s: %w", p, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("exec ledger: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("exec ledger: sync %s: %w", dir, err)
	}
	return nil
}

func argvDigest(argv []string) string {
	b, _ := json.Marshal(argv)
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Recover decides from the ledger. A done record for the lost attempt
// means it ran and its result is known (Done with that result); a started
// record without a done record means it may have run, in whole or in part,
// and it is never spawned again (Ambiguous). No record at all proves that
// the process was never spawned only when the attempt was this instance's
// (lost.Own: the record is written and synced before the spawn), and then
// it runs again (Rerun); another instance's attempt has its records on
// that instance's disk, so only it can tell (Defer, and Ambiguous if it
// does not come back in time).
func (e *Exec) Recover(_ context.Context, c executor.Call, lost executor.Lost) (executor.Recovery, error) {
	done, err := e.ledger.path(c.OpID, lost.Attempt, ".done")
	if err != nil {
		return executor.Recovery{}, err
	}
	b, err := os.ReadFile(done)
	switch {
	case err == nil:
		if !json.Valid(b) {
			return executor.Recovery{Action: executor.Ambiguous,
				Known: fmt.Sprintf("exec attempt %s ran; its recorded result is unreadable; it is never run again", lost.Attempt)}, nil
		}
		return executor.Recovery{Action: executor.Done, Result: b}, nil
	case !errors.Is(err, fs.ErrNotExist):
		return executor.Recovery{}, fmt.Errorf("exec ledger: %w", err)
	}
	st := filepath.Join(filepath.Dir(done), lost.Attempt+".started")
	b, err = os.ReadFile(st)
	switch {
	case errors.Is(err, fs.ErrNotExist) && lost.Own:
		return executor.Recovery{Action: executor.Rerun}, nil
	case errors.Is(err, fs.ErrNotExist):
		return executor.Recovery{Action: executor.Defer,
			Known: fmt.Sprintf("exec attempt %s may have spawned on another instance, whose ledger alone can tell; it is never run again", lost.Attempt)}, nil
	case err != nil:
		return executor.Recovery{}, fmt.Errorf("exec ledger: %w", err)
	}
	var rec started
	if err := json.Unmarshal(b, &rec); err != nil {
		return executor.Recovery{Action: executor.Ambiguous,
			Known: fmt.Sprintf("exec attempt %s started (record unreadable) and has no recorded exit; it is never run again", lost.Attempt)}, nil
	}
	pid := "pid unknown"
	if rec.PID > 0 {
		pid = fmt.Sprintf("pid %d", rec.PID)
	}
	return executor.Recovery{Action: executor.Ambiguous,
		Known: fmt.Sprintf("exec attempt %s started %s (%s) and has no recorded exit; it is never run again",
			lost.Attempt, rec.StartedAt.Format(time.RFC3339Nano), pid)}, nil
}

// forget removes the op's records.
func (l ledger) forget(op string) error {
	d, err := l.opDir(op)
	if err != nil {
		return err
	}
	return os.RemoveAll(d)
}

// Forget removes the op's ledger records: the runner calls it once the
// op's terminal event is stored, when no recovery can ask about it again.
func (e *Exec) Forget(_ context.Context, opID string) error { return e.ledger.forget(opID) }

// Kept lists the ops the ledger holds records of.
func (e *Exec) Kept(context.Context) ([]string, error) {
	entries, err := os.ReadDir(e.ledger.dir)
	if err != nil {
		return nil, fmt.Errorf("exec ledger: %w", err)
	}
	var ops []string
	for _, en := range entries {
		if en.IsDir() && validName(en.Name()) {
			ops = append(ops, en.Name())
		}
	}
	return ops, nil
}
