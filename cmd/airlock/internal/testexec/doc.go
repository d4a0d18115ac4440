// Package testexec holds executors for tests that must count real
// executions across crashes.
package testexec
