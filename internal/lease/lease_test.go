package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestWithin(t *testing.T) {
	s := Now()
	assert.True(t, s.Within(time.Hour))
	time.Sleep(20 * time.Millisecond)
	assert.False(t, s.Within(10*time.Millisecond))
	assert.True(t, s.Within(time.Hour))
}

// Each clock on its own ends a lease: a machine that slept moved the
// suspend-counting and wall clocks, not the monotonic one; a wall clock
// set back cannot be trusted to tell.
func TestAnyClockEndsALease(t *testing.T) {
	slept := Now()
	slept.boot -= 2 * time.Hour
	slept.wall = slept.wall.Add(-2 * time.Hour)
	setBack := Now()
	setBack.wall = setBack.wall.Add(time.Minute)
	bootAlone := Now()
	bootAlone.boot -= 2 * time.Hour
	wallAlone := Now()
	wallAlone.wall = wallAlone.wall.Add(-2 * time.Hour)
	for name, s := range map[string]Start{"slept": slept, "wall set back": setBack, "boot clock alone": bootAlone, "wall clock alone": wallAlone} {
		assert.False(t, s.Within(time.Hour), name)
	}
}
