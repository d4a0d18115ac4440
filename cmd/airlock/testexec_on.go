//go:build airlocktest

package main

import (
	"os"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/testexec"
	"github.com/airlock-dev/airlock/consumers/executor"
)

// testExecutors registers the counting and blocking executors in test
// builds when AIRLOCK_TEST_LEDGER names a directory.
func testExecutors() []executor.Executor {
	dir := os.Getenv("AIRLOCK_TEST_LEDGER")
	if dir == "" {
		return nil
	}
	return []executor.Executor{
		&testexec.Counter{Dir: dir},
		// count_slow records its execution, then takes a minute to return:
		// a kill in that minute leaves a side effect without a result.
		&testexec.Counter{Dir: dir, Name: "count_slow", Delay: time.Minute},
		&testexec.Blocker{Dir: dir},
	}
}
