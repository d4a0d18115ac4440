package authority_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The package starts servers and connections; each must be gone at the
// end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
