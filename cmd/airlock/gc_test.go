package main

import (
	"os"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTuneGCLeavesAnExplicitGOGC(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)

	// Set: what is in force (as the runtime took it from GOGC at start)
	// stays.
	t.Setenv("GOGC", "150")
	debug.SetGCPercent(150)
	assert.Equal(t, 150, tuneGC())
	assert.Equal(t, 150, debug.SetGCPercent(100))

	os.Unsetenv("GOGC") // t.Setenv restores it afterwards
	assert.Equal(t, DefaultGOGC, tuneGC())
	assert.Equal(t, DefaultGOGC, debug.SetGCPercent(100))
}
