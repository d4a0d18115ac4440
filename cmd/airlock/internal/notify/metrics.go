package notify

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// The metric families, by name; the histogram without its _bucket, _sum
// and _count suffixes. Each process counts the notifications it sent, so
// across processes sum them.
const (
	Deliveries      = "airlock_webhook_deliveries_total" // counter {ws, outcome}
	Attempts        = "airlock_webhook_attempts_total"   // counter {outcome}
	DeliverySeconds = "airlock_webhook_delivery_seconds" // histogram {outcome}
)

// How a delivery ended (Deliveries, DeliverySeconds).
const (
	// Delivered: an attempt got a 2xx.
	Delivered = "delivered"
	// Failed: the endpoint refused it (a status other than 2xx, 408, 429
	// or 5xx), or it could not be sent at all; never retried.
	Failed = "failed"
	// Dropped: MaxAttempts attempts got no 2xx.
	Dropped = "dropped"
	// Expired: the hold expired before it was delivered; nothing more is
	// sent.
	Expired = "expired"
)

// How an attempt ended (Attempts). Every delivery is its retries and one
// last attempt, ok or error, unless the hold expired or the process
// stopped in between.
const (
	// AttemptOK: a 2xx.
	AttemptOK = "ok"
	// AttemptRetry: a 408, 429, 5xx or no answer, and another attempt
	// follows.
	AttemptRetry = "retry"
	// AttemptError: the attempt that ended a delivery without a 2xx (a
	// refusal, or the last of MaxAttempts).
	AttemptError = "error"
)

type metrics struct {
	deliveries *prometheus.CounterVec
	attempts   *prometheus.CounterVec
	seconds    *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: Deliveries,
			Help: "Hold notifications this process finished, by workspace and outcome: delivered, failed (refused), dropped (no 2xx after the last attempt), expired (the hold expired first).",
		}, []string{"ws", "outcome"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: Attempts,
			Help: "POSTs of hold notifications by outcome: ok (2xx), retry (408, 429, 5xx or no answer, tried again), error (the last attempt of a delivery that failed or was dropped).",
		}, []string{"outcome"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    DeliverySeconds,
			Help:    "Time from the first attempt of a hold notification to its end, retries included, by outcome (delivered, failed, dropped).",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"outcome"}),
	}
	for _, o := range []string{AttemptOK, AttemptRetry, AttemptError} {
		m.attempts.WithLabelValues(o)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.deliveries, m.attempts, m.seconds} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("notify: register metrics: %w", err)
		}
	}
	return m, nil
}
