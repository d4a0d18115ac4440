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

// pwriteAll writes all of b to fd at off.
func pwriteAll(fd int, b []byte, off int64) error {
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
		b = b[n:]
		off += int64(n)
	}
	return nil
}
