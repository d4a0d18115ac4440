package command

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/internal/ledger"
)

// The ledger (internal/ledger) holds, per attempt, a started record,
// written and synced before the process is spawned and written again with
// the pid once it is (without fsync: a crash loses only the pid), and the
// result, after the process exited.

// started is the content of an attempt's started record.
type started struct {
	Attempt    string    `json:"attempt"`
	ArgvSHA256 string    `json:"argv_sha256"`
	StartedAt  time.Time `json:"started_at"`
	// PID is 0 until the process is spawned; the record is rewritten with
	// it afterwards.
	PID int `json:"pid,omitempty"`
}

// begin durably records that op's attempt is about to spawn argv. It
// fails with ledger.ErrStarted if the attempt has a record already.
func (e *Exec) begin(op, attempt string, argv []string, at time.Time) (ledger.Record, started, error) {
	rec := started{Attempt: attempt, ArgvSHA256: argvDigest(argv), StartedAt: at.UTC()}
	b, _ := json.Marshal(rec)
	r, err := e.ledger.Begin(op, attempt, b)
	return r, rec, err
}

// spawned records the started record again, with the pid.
func (e *Exec) spawned(r ledger.Record, rec started) error {
	b, _ := json.Marshal(rec)
	return r.Update(b)
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
	b, err := e.ledger.Done(c.OpID, lost.Attempt)
	switch {
	case err == nil:
		if !json.Valid(b) {
			return executor.Recovery{Action: executor.Ambiguous,
				Known: fmt.Sprintf("exec attempt %s ran; its recorded result is unreadable; it is never run again", lost.Attempt)}, nil
		}
		return executor.Recovery{Action: executor.Done, Result: b}, nil
	case !errors.Is(err, fs.ErrNotExist):
		return executor.Recovery{}, err
	}
	b, err = e.ledger.Started(c.OpID, lost.Attempt)
	switch {
	case errors.Is(err, fs.ErrNotExist) && lost.Own:
		return executor.Recovery{Action: executor.Rerun}, nil
	case errors.Is(err, fs.ErrNotExist):
		return executor.Recovery{Action: executor.Defer,
			Known: fmt.Sprintf("exec attempt %s may have spawned on another instance, whose ledger alone can tell; it is never run again", lost.Attempt)}, nil
	case err != nil:
		return executor.Recovery{}, err
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

// Forget removes the op's ledger records: the runner calls it once the
// op's terminal event is stored, when no recovery can ask about it again.
func (e *Exec) Forget(_ context.Context, opID string) error { return e.ledger.Forget(opID) }

// Kept lists the ops the ledger holds records of.
func (e *Exec) Kept(context.Context) ([]string, error) { return e.ledger.Kept() }
