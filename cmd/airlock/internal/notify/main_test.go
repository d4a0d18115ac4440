package notify_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a test starts (notifiers, NATS, HTTP servers and
// clients) must be gone when it ends.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
