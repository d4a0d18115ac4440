package app_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a test starts (consumers, NATS, Pebble) must be gone when
// it ends.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
