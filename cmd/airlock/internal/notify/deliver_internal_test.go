package notify

import (
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestBackoff(t *testing.T) {
	n := &Notifier{cfg: Config{Backoff: time.Second, MaxBackoff: time.Minute}}
	for attempt, base := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 5: 16 * time.Second, 6: 32 * time.Second} {
		for range 50 {
			d := n.backoff(attempt, -1)
			assert.GreaterOrEqual(t, d, base, "attempt %d", attempt)
			assert.LessOrEqual(t, d, base+base/2, "attempt %d", attempt)
		}
	}
	for _, attempt := range []int{7, 20, 1000} {
		assert.Equal(t, time.Minute, n.backoff(attempt, -1), "attempt %d is capped", attempt)
	}
	assert.Equal(t, 7*time.Second, n.backoff(1, 7*time.Second), "Retry-After replaces the backoff")
	assert.Equal(t, time.Duration(0), n.backoff(3, 0))
	assert.Equal(t, time.Minute, n.backoff(1, time.Hour), "Retry-After is capped at MaxBackoff")
}

func TestRetryAfter(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"0": 0, "5": 5 * time.Second, "120": 2 * time.Minute,
		"": -1, "-1": -1, "1.5": -1, "Wed, 21 Oct 2015 07:28:00 GMT": -1, "99999999999": -1,
	} {
		assert.Equal(t, want, retryAfter(v), "%q", v)
	}
}

func TestRedactLeavesTheURLOut(t *testing.T) {
	err := redact(&url.Error{Op: "Post", URL: "https://hooks.example.com/T0/B0/secret", Err: errors.New("connection refused")})
	assert.Equal(t, "Post: connection refused", err.Error())
	other := errors.New("other")
	assert.Equal(t, other, redact(other))
}
