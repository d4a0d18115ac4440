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

// validName accepts op and attempt ids as single path elements.
func validName(s string) bool {
	return s != "" && len(s) <= 200 && !strings.HasPrefix(s, ".") &&
		!strings.ContainsAny(s, "/\\\x00")
}

func (l Ledger) errorf(format string, args ...any) error {
	return fmt.Errorf(l.Name+" ledger: "+format, args...)
}

func (l Ledger) opDir(op string) (string, error) {
	if !validName(op) {
		return "", l.errorf("op id %q is not a file name", op)
	}
	return filepath.Join(l.Dir, op), nil
}

func (l Ledger) path(op, attempt, suffix string) (string, error) {
	d, err := l.opDir(op)
	if err != nil {
		return "", err
	}
	if !validName(attempt) {
		return "", l.errorf("attempt id %q is not a file name", attempt)
	}
	return filepath.Join(d, attempt+suffix), nil
}

// Begin durably records that op's attempt is about to take its effect,
// with rec as the record's content, and returns the record's path. It
// fails with ErrStarted if the attempt has a record already.
func (l Ledger) Begin(op, attempt string, rec []byte) (string, error) {
	p, err := l.path(op, attempt, ".started")
	if err != nil {
		return "", err
	}
	if err := l.mkOpDir(filepath.Dir(p)); err != nil {
		return "", err
	}
	return p, l.createDurable(p, rec)
}

// Update replaces the started record at p by rec, in place and without
// fsync: a crash loses at most what rec adds, or tears the record, which
// still reads as started. rec is normally the first record with more
// detail; one that is shorter has the rest cut off.
func (l Ledger) Update(p string, rec []byte) error {
	fd, err := openFile(p, syscall.O_WRONLY)
	if err != nil {
		return l.errorf("%w", err)
	}
	err = pwriteAll(fd, rec)
	if err == nil {
		err = ignoringEINTR(func() error { return syscall.Ftruncate(fd, int64(len(rec))) })
	}
	if cerr := syscall.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return l.errorf("write %s: %w", p, err)
	}
	return nil
}

// Abandon durably removes a started record whose effect was never taken.
func (l Ledger) Abandon(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return l.errorf("%w", err)
	}
	return l.syncDir(filepath.Dir(p))
}

// Finish durably records the result of op's attempt.
func (l Ledger) Finish(op, attempt string, result []byte) error {
	p, err := l.path(op, attempt, ".done")
	if err != nil {
		return err
	}
	if err := l.replace(p, result, !l.NoSync); err != nil {
		return err
	}
	return l.syncDir(filepath.Dir(p))
}

// Done returns the result Finish recorded for op's attempt, or an error
// matching fs.ErrNotExist when there is none.
func (l Ledger) Done(op, attempt string) ([]byte, error) { return l.read(op, attempt, ".done") }

// Started returns the started record of op's attempt, or an error
// matching fs.ErrNotExist when there is none.
func (l Ledger) Started(op, attempt string) ([]byte, error) {
	return l.read(op, attempt, ".started")
}

func (l Ledger) read(op, attempt, suffix string) ([]byte, error) {
	p, err := l.path(op, attempt, suffix)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, l.errorf("%w", err)
	}
	return b, nil
}

// Forget removes the op's records.
func (l Ledger) Forget(op string) error {
	d, err := l.opDir(op)
	if err != nil {
		return err
	}
	if removeFlat(d) == nil {
		return nil
	}
	if err := os.RemoveAll(d); err != nil {
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
	for _, en := range entries {
		if en.IsDir() && validName(en.Name()) {
			ops = append(ops, en.Name())
		}
	}
	return ops, nil
}

func (l Ledger) mkOpDir(d string) error {
	err := ignoringEINTR(func() error { return syscall.Mkdir(d, 0o700) })
	if err == syscall.EEXIST {
		return nil
	}
	if err != nil {
		return l.errorf("mkdir %s: %w", d, err)
	}
	return l.syncDir(l.Dir)
}

// createDurable creates p, failing with ErrStarted if it exists, writes
// b, and fsyncs it and its directory.
func (l Ledger) createDurable(p string, b []byte) error {
	fd, err := openFile(p, syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY)
	if err == syscall.EEXIST {
		return ErrStarted
	}
	if err != nil {
		return l.errorf("create %s: %w", p, err)
	}
	if err := writeClose(fd, b, !l.NoSync); err != nil {
		return l.errorf("write %s: %w", p, err)
	}
	return l.syncDir(filepath.Dir(p))
}

// replace writes b to a temporary file beside p, fsyncs it if sync, and
// renames it to p. The temporary name is fixed: one attempt writes its
// result once, and a file left there by a crash is written over (Forget
// removes it with the rest).
func (l Ledger) replace(p string, b []byte, sync bool) error {
	tmp := p + ".tmp"
	fd, err := openFile(tmp, syscall.O_CREAT|syscall.O_TRUNC|syscall.O_WRONLY)
	if err != nil {
		return l.errorf("create %s: %w", tmp, err)
	}
	err = writeClose(fd, b, sync)
	if err == nil {
		err = ignoringEINTR(func() error { return syscall.Rename(tmp, p) })
	}
	if err != nil {
		_ = syscall.Unlink(tmp)
		return l.errorf("write %s: %w", p, err)
	}
	return nil
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
