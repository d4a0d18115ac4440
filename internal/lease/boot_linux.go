package lease

import (
	"time"

	"golang.org/x/sys/unix"
)

// boot is CLOCK_BOOTTIME: monotonic, and it counts suspend.
func boot() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
