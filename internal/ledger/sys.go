package ledger

import (
	"errors"
	"syscall"
)

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
