//go:build !linux

package lease

import "time"

// boot is 0 where the system offers no clock that counts suspend: the
// wall clock, which a suspend does move, stands in for it.
func boot() time.Duration { return 0 }
