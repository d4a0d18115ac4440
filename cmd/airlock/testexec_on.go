//go:build airlocktest

package main

import (
	"os"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/internal/testexec"
)

// testExecutors registers the counting and blocking executors in test
// builds when AIRLOCK_TEST_LEDGER names a directory.
func testExecutors() []executor.Executor {
	dir := os.Getenv("AIRLOCK_TEST_LEDGER")
	if dir == "" {
		return nil
	}
	return []executor.Executor{&testexec.Counter{Dir: dir}, &testexec.Blocker{Dir: dir}}
}
