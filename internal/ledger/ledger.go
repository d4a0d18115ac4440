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

// file is op's file, after checking both ids.
func (l Ledger) file(op, attempt string) (string, error) {
	if !validName(op) {
		return "", l.errorf("op id %q is not a file name", op)
	}
	if !validName(attempt) {
		return "", l.errorf("attempt id %q is not a file name", attempt)
	}
	return filepath.Join(l.Dir, op+suffix), nil
}

// Record is an attempt's started record, from Begin.
type Record struct {
	l             Ledger
	path, attempt string
}

// Begin durably records that op's attempt is about to take its effect,
// with rec as the record's content. It fails with ErrStarted if the
// attempt has a record already.
func (l Ledger) Begin(op, attempt string, rec []byte) (Record, error) {
	p, err := l.file(op, attempt)
	if err != nil {
		return Record{}, err
	}
	r := Record{l: l, path: p, attempt: attempt}
	frame := appendFrame(nil, kindStarted, attempt, rec)
	// The op's first attempt here creates its file: the frame, then the
	// file and its directory entry synced.
	fd, err := openFile(p, syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY|syscall.O_APPEND)
	switch {
	case err == nil:
		if err := writeClose(fd, frame, !l.NoSync); err != nil {
			return Record{}, l.errorf("write %s: %w", p, err)
		}
		return r, l.syncDir(l.Dir)
	case err != syscall.EEXIST:
		return Record{}, l.errorf("create %s: %w", p, err)
	}
	// A later attempt (a recovery that runs the op again) appends.
	b, err := os.ReadFile(p)
	if err != nil {
		return Record{}, l.errorf("%w", err)
	}
	if _, started := parseFrames(b).startedOf(attempt); started {
		return Record{}, ErrStarted
	}
	return r, l.append(p, frame, !l.NoSync)
}

// Update records rec as the attempt's started record from now on, without
// fsync: a crash loses at most what rec adds. rec is the first record with
// more detail, such as a pid.
func (r Record) Update(rec []byte) error {
	return r.l.append(r.path, appendFrame(nil, kindStarted, r.attempt, rec), false)
}

// Abandon durably records that the attempt's effect was never taken: it
// reads as having no started record.
func (r Record) Abandon() error {
	return r.l.append(r.path, appendFrame(nil, kindAbandoned, r.attempt, nil), !r.l.NoSync)
}

// Finish durably records the result of op's attempt.
func (l Ledger) Finish(op, attempt string, result []byte) error {
	p, err := l.file(op, attempt)
	if err != nil {
		return err
	}
	fd, err := openFile(p, syscall.O_WRONLY|syscall.O_APPEND)
	created := false
	if err == syscall.ENOENT {
		// No started record here (a caller that did not Begin): the
		// file is new, and so is its directory entry.
		fd, err = openFile(p, syscall.O_CREAT|syscall.O_WRONLY|syscall.O_APPEND)
		created = true
	}
	if err != nil {
		return l.errorf("open %s: %w", p, err)
	}
	if err := writeClose(fd, appendFrame(nil, kindDone, attempt, result), !l.NoSync); err != nil {
		return l.errorf("write %s: %w", p, err)
	}
	if created {
		return l.syncDir(l.Dir)
	}
	return nil
}

// append appends frame to the existing file p, fsyncing it if sync.
func (l Ledger) append(p string, frame []byte, sync bool) error {
	fd, err := openFile(p, syscall.O_WRONLY|syscall.O_APPEND)
	if err != nil {
		return l.errorf("open %s: %w", p, err)
	}
	if err := writeClose(fd, frame, sync); err != nil {
		return l.errorf("write %s: %w", p, err)
	}
	return nil
}

// Done returns the result Finish recorded for op's attempt, or an error
// matching fs.ErrNotExist when there is none.
func (l Ledger) Done(op, attempt string) ([]byte, error) {
	return l.lookup(op, attempt, ".done", "result", parsed.doneOf)
}

// Started returns the started record of op's attempt, or an error
// matching fs.ErrNotExist when there is none. A record cut short by a
// crash is returned as far as it goes (it may not parse): it is a started
// record all the same.
func (l Ledger) Started(op, attempt string) ([]byte, error) {
	return l.lookup(op, attempt, ".started", "started record", parsed.startedOf)
}

// lookup finds one record of op's attempt with of in op's file, or, when
// the op has none, in the earlier layout's <op>/<attempt><oldSuffix>.
func (l Ledger) lookup(op, attempt, oldSuffix, what string, of func(parsed, string) ([]byte, bool)) ([]byte, error) {
	p, found, err := l.read(op, attempt)
	switch {
	case err != nil:
		return nil, err
	case !found:
		return l.readOld(op, attempt, oldSuffix)
	}
	if b, ok := of(p, attempt); ok {
		return b, nil
	}
	return nil, l.errorf("no %s of attempt %s: %w", what, attempt, fs.ErrNotExist)
}

// read parses op's file; found is false when it has none.
func (l Ledger) read(op, attempt string) (parsed, bool, error) {
	p, err := l.file(op, attempt)
	if err != nil {
		return parsed{}, false, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return parsed{}, false, nil
	}
	if err != nil {
		return parsed{}, false, l.errorf("%w", err)
	}
	return parseFrames(b), true, nil
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
	err := ignoringEINTR(func() error { return syscall.Unlink(filepath.Join(l.Dir, op+suffix)) })
	if err != nil && err != syscall.ENOENT {
		return l.errorf("remove the records of %s: %w", op, err)
	}
	// The earlier layout's directory, if there is one: removing a
	// directory that is not there costs one failed call.
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

// Kept lists the ops the ledger holds records of.
func (l Ledger) Kept() ([]string, error) {
	entries, err := os.ReadDir(l.Dir)
	if err != nil {
		return nil, l.errorf("%w", err)
	}
	var ops []string
	seen := map[string]bool{}
	for _, en := range entries {
		name := en.Name()
		op, isFile := strings.CutSuffix(name, suffix)
		switch {
		case isFile && en.Type().IsRegular() && validName(op):
		case en.IsDir() && validName(name):
			op = name // the earlier layout
		default:
			continue
		}
		if !seen[op] {
			seen[op] = true
			ops = append(ops, op)
		}
	}
	return ops, nil
}

func (l Ledger) syncDir(dir string) error {
	if l.NoSync {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return l.errorf("%w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return l.errorf("sync %s: %w", dir, err)
	}
	return nil
}
