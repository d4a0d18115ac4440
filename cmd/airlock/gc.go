package main

import (
	"os"
	"runtime/debug"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/bench"
)

// DefaultGOGC is the garbage collector's target for the processes that
// run the pipeline (serve, bench) when the GOGC environment variable is
// not set. Every stored message is copied and parsed several times on its
// way through NATS; at Go's default of 100 the collector ran about 10% of
// the pipeline's CPU. 200 lets the heap grow to three times the live data
// between collections instead of two, for about 4% less CPU per op in
// `airlock bench` (docs/performance.md). Set GOGC to choose otherwise.
const DefaultGOGC = 200

// tuneGC applies DefaultGOGC unless GOGC is set, and returns the value in
// force (-1 when the collector is off).
func tuneGC() int {
	if _, set := os.LookupEnv("GOGC"); set {
		return bench.GOGC()
	}
	debug.SetGCPercent(DefaultGOGC)
	return DefaultGOGC
}
