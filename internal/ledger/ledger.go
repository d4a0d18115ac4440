package ledger

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrStarted is Begin's answer when the attempt has a started record
// already.
var ErrStarted = errors.New("attempt already started")

// Ledger is the records of one executor in Dir. Name ("exec", ...) begins
// its error messages.
type Ledger struct {
	Dir  string
	Name string
	// NoSync writes records without fsync: they survive a crash of the
	// process (the kernel has them) but not of the machine. Right where
	// what the records back is no more durable than that (an embedded
	// server that fsyncs on an interval loses the op's events to a power
	// loss too); wrong beside a replicated or always-synced stream.
	NoSync bool
}

// suffix ends the name of an op's file.
const suffix = ".attempts"

// validName accepts op and attempt ids as single path elements (and
// attempt ids as a frame's header field: no space or newline).
func validName(s string) bool {
	return s != "" && len(s) <= 200 && !strings.HasPrefix(s, ".") &&
		!strings.ContainsAny(s, "/\\\x00 \n\t\r")
}

func (l Ledger) errorf(format string, args ...any) error {
	return fmt.Errorf(l.Name+" ledger: "+format, args...)
}

// Record is an attempt's started record, from Begin.
type Record struct {
	l           Ledger
	j           *journal
	op, attempt string
}

// Begin durably records that op's attempt is about to take its effect,
// with rec as the record's content. It fails with ErrStarted if the
// attempt has a record already.
func (l Ledger) Begin(op, attempt string, rec []byte) (Record, error) {
	j, err := l.journal(op, attempt)
	if err != nil {
		return Record{}, err
	}
	var old bool
	j.view(op, func(_ *opState, o bool) { old = o })
	if old {
		// An op with records in an earlier layout: its attempts there
		// count too. Its later records go to the journal.
		if _, err := l.oldLookup(op, attempt, ".started", "started record", parsed.startedOf); err == nil {
			return Record{}, ErrStarted
		} else if !errors.Is(err, fs.ErrNotExist) {
			return Record{}, err
		}
	}
	err = j.write(jStarted, op, attempt, rec, !l.NoSync, func(o *opState) error {
		if _, ok := o.startedOf(attempt); ok {
			return ErrStarted
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrStarted) {
			return Record{}, err
		}
		return Record{}, l.errorf("%w", err)
	}
	return Record{l: l, j: j, op: op, attempt: attempt}, nil
}

// Update records rec as the attempt's started record from now on, without
// fsync: a crash loses at most what rec adds. rec is the first record with
// more detail, such as a pid.
func (r Record) Update(rec []byte) error {
	if err := r.j.write(jStarted, r.op, r.attempt, rec, false, nil); err != nil {
		return r.l.errorf("%w", err)
	}
	return nil
}

// Abandon durably records that the attempt's effect was never taken: it
// reads as having no started record.
func (r Record) Abandon() error {
	if err := r.j.write(jAbandoned, r.op, r.attempt, nil, !r.l.NoSync, nil); err != nil {
		return r.l.errorf("%w", err)
	}
	return nil
}

// Finish durably records the result of op's attempt.
func (l Ledger) Finish(op, attempt string, result []byte) error {
	j, err := l.journal(op, attempt)
	if err != nil {
		return err
	}
	if err := j.write(jDone, op, attempt, result, !l.NoSync, nil); err != nil {
		return l.errorf("%w", err)
	}
	return nil
}

// journal is l.Dir's journal, after checking both ids.
func (l Ledger) journal(op, attempt string) (*journal, error) {
	if !validName(op) {
		return nil, l.errorf("op id %q is not a file name", op)
	}
	if !validName(attempt) {
		return nil, l.errorf("attempt id %q is not a file name", attempt)
	}
	j, err := journalOf(l.Dir)
	if err != nil {
		return nil, l.errorf("read %s: %w", l.Dir, err)
	}
	return j, nil
}

// Done returns the result Finish recorded for op's attempt, or an error
// matching fs.ErrNotExist when there is none.
func (l Ledger) Done(op, attempt string) ([]byte, error) {
	return l.lookup(op, attempt, (*opState).doneOf, ".done", "result", parsed.doneOf)
}

// Started returns the started record of op's attempt, or an error
// matching fs.ErrNotExist when there is none. A record in an earlier
// layout's file cut short by a crash is returned as far as it goes (it may
// not parse): it is a started record all the same.
func (l Ledger) Started(op, attempt string) ([]byte, error) {
	return l.lookup(op, attempt, (*opState).startedOf, ".started", "started record", parsed.startedOf)
}

// lookup finds one record of op's attempt with of in the journal, else,
// when the op has records in an earlier layout, with oldOf there.
func (l Ledger) lookup(op, attempt string, of func(*opState, string) ([]byte, bool), oldSuffix, what string, oldOf func(parsed, string) ([]byte, bool)) ([]byte, error) {
	j, err := l.journal(op, attempt)
	if err != nil {
		return nil, err
	}
	var b []byte
	var ok, old bool
	j.view(op, func(o *opState, isOld bool) { b, ok = of(o, attempt); old = isOld })
	switch {
	case ok:
		return b, nil
	case old:
		return l.oldLookup(op, attempt, oldSuffix, what, oldOf)
	}
	return nil, l.errorf("no %s of attempt %s: %w", what, attempt, fs.ErrNotExist)
}

// oldLookup finds one record of op's attempt in its file of the layout
// before the journal (<op>.attempts), or, when it has none, in the one
// before that (<op>/<attempt><oldSuffix>).
func (l Ledger) oldLookup(op, attempt, oldSuffix, what string, of func(parsed, string) ([]byte, bool)) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(l.Dir, op+suffix))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return l.readOld(op, attempt, oldSuffix)
	case err != nil:
		return nil, l.errorf("%w", err)
	}
	if rec, ok := of(parseFrames(b), attempt); ok {
		return rec, nil
	}
	return nil, l.errorf("no %s of attempt %s: %w", what, attempt, fs.ErrNotExist)
}

// readOld reads a record of the earlier layout: <op>/<attempt><suffix>.
func (l Ledger) readOld(op, attempt, suffix string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(l.Dir, op, attempt+suffix))
	if err != nil {
		return nil, l.errorf("%w", err)
	}
	return b, nil
}

// Forget removes the op's records.
func (l Ledger) Forget(op string) error {
	if !validName(op) {
		return l.errorf("op id %q is not a file name", op)
	}
	j, err := journalOf(l.Dir)
	if err != nil {
		return l.errorf("read %s: %w", l.Dir, err)
	}
	// No sync: a forget lost to a crash leaves the op's records, and
	// recovery forgets it again once it finds the op settled.
	if err := j.write(jForget, op, "", nil, false, nil); err != nil {
		return l.errorf("forget %s: %w", op, err)
	}
	var old bool
	j.view(op, func(_ *opState, o bool) { old = o })
	if !old {
		return nil
	}
	if err := l.forgetOld(op); err != nil {
		return err
	}
	j.mu.Lock()
	delete(j.old, op)
	j.mu.Unlock()
	return nil
}

// forgetOld removes op's records of the earlier layouts.
func (l Ledger) forgetOld(op string) error {
	err := ignoringEINTR(func() error { return syscall.Unlink(filepath.Join(l.Dir, op+suffix)) })
	if err != nil && err != syscall.ENOENT {
		return l.errorf("remove the records of %s: %w", op, err)
	}
	old := filepath.Join(l.Dir, op)
	switch err := ignoringEINTR(func() error { return syscall.Rmdir(old) }); err {
	case nil, syscall.ENOENT, syscall.ENOTDIR:
		return nil
	}
	if err := os.RemoveAll(old); err != nil {
		return l.errorf("%w", err)
	}
	return nil
}

// Kept lists the ops the ledger holds records of, sorted.
func (l Ledger) Kept() ([]string, error) {
	j, err := journalOf(l.Dir)
	if err != nil {
		return nil, l.errorf("read %s: %w", l.Dir, err)
	}
	return j.kept(), nil
}
