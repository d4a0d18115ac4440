//go:build !airlocktest

package main

import "github.com/airlock-dev/airlock/consumers/executor"

// testExecutors is empty outside test builds.
func testExecutors() []executor.Executor { return nil }
