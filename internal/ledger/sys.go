package ledger

import (
	"errors"
	"path/filepath"
	"syscall"
)

// The records are written with bare system calls. An os.File costs
// several more on each open (the poller's probes of the descriptor), a
// temporary name from os.CreateTemp more again, and an exec call writes
// four records: BenchmarkAttempt measures the difference.

// openFile opens name with flags (O_CLOEXEC added) and mode 0600.
func openFile(name string, flags int) (int, error) {
	for {
		fd, err := syscall.Open(name, flags|syscall.O_CLOEXEC, 0o600)
		if err != syscall.EINTR {
			return fd, err
		}
	}
}

// ignoringEINTR calls f again while it is interrupted by a signal.
func ignoringEINTR(f func() error) error {
	for {
		if err := f(); err != syscall.EINTR {
			return err
		}
	}
}

// writeClose writes all of b to fd from its offset, fsyncs it if sync, and
// closes it; the first error is returned, and fd is closed in any case.
func writeClose(fd int, b []byte, sync bool) error {
	err := writeAll(fd, b)
	if err == nil && sync {
		err = ignoringEINTR(func() error { return syscall.Fsync(fd) })
	}
	if cerr := syscall.Close(fd); err == nil {
		err = cerr
	}
	return err
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := syscall.Write(fd, b)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return err
		case n == 0:
			return errors.New("short write")
		}
		b = b[n:]
	}
	return nil
}

// pwriteAll writes all of b to fd at offset 0.
func pwriteAll(fd int, b []byte) error {
	var off int64
	for len(b) > 0 {
		n, err := syscall.Pwrite(fd, b, off)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return err
		case n == 0:
			return errors.New("short write")
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// removeFlat removes dir and the files in it, with one read of the
// directory. It fails, leaving the rest to os.RemoveAll, on anything
// else: a subdirectory, a read or removal that fails.
func removeFlat(dir string) error {
	fd, err := openFile(dir, syscall.O_RDONLY|syscall.O_DIRECTORY)
	if err != nil {
		return err
	}
	var names []string
	buf := make([]byte, 4096)
	for {
		n, err := syscall.ReadDirent(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			syscall.Close(fd)
			return err
		}
		if n <= 0 {
			break
		}
		_, _, names = syscall.ParseDirent(buf[:n], -1, names)
	}
	syscall.Close(fd)
	for _, name := range names {
		if err := ignoringEINTR(func() error { return syscall.Unlink(filepath.Join(dir, name)) }); err != nil && err != syscall.ENOENT {
			return err
		}
	}
	return ignoringEINTR(func() error { return syscall.Rmdir(dir) })
}
