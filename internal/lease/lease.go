package lease

import "time"

// Start is when a lease was taken: one reading of each clock.
type Start struct {
	mono time.Time
	wall time.Time
	boot time.Duration
}

// Now reads the clocks.
func Now() Start {
	t := time.Now()
	return Start{mono: t, wall: t.Round(0), boot: boot()}
}

// Within reports whether surely less than d has passed since s: by the
// monotonic clock, the suspend-counting one and the wall clock. A wall
// clock set back before s cannot tell, and ends the lease.
func (s Start) Within(d time.Duration) bool {
	n := Now()
	w := n.wall.Sub(s.wall)
	return n.boot-s.boot < d && n.mono.Sub(s.mono) < d && w < d && w >= 0
}
