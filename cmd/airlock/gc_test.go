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

	t.Setenv("GOGC", "100") // set: whatever the runtime took from it stays
	assert.Equal(t, 100, tuneGC())
	assert.Equal(t, 100, debug.SetGCPercent(100))

	os.Unsetenv("GOGC") // t.Setenv restores it afterwards
	assert.Equal(t, DefaultGOGC, tuneGC())
	assert.Equal(t, DefaultGOGC, debug.SetGCPercent(100))
}
