package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/consumers/projector"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The transitions the scripted app run does not reach: an expired hold, a
// denial on resume (not a decision), and clock skew between events.
func TestTransitionsEdgeCases(t *testing.T) {
	tr := metrics.NewTransitions()
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(tr))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tr.Applied([]projector.Transition{
		{Type: events.TypeHeld, Data: &events.Held{Rule: "wire"}, From: events.StateNew, To: events.StateHeld, At: t0},
		{Type: events.TypeExpired, Data: &events.Expired{}, From: events.StateHeld, To: events.StateExpired, Since: t0, At: t0.Add(90 * time.Second)},
		{Type: events.TypeDenied, Data: &events.Denied{Code: events.CodeResumeDenied}, From: events.StateGranted, To: events.StateDenied, At: t0},
		// A claim stored a little before the grant's time (another
		// leader's clock) counts as zero, never negative: a claimed event
		// of an earlier version, and a started event that claims.
		{Type: events.TypeClaimed, Data: &events.Claimed{}, From: events.StateReady, To: events.StateExecuting, Granted: t0.Add(time.Second), At: t0},
		{Type: events.TypeStarted, Data: &events.Started{Claim: &events.Claim{}}, From: events.StateReady, To: events.StateExecuting, Granted: t0.Add(time.Second), At: t0},
		// A granted op started at once by a gate's process (ADR 0029):
		// its resume is no first decision.
		{Type: events.TypeStarted, Data: &events.Started{Decision: &events.Decided{Rule: "wire"}, Claim: &events.Claim{}}, From: events.StateGranted, To: events.StateExecuting, Granted: t0, At: t0},
	})
	expected := `
# HELP airlock_decisions_total First decisions on requests, by outcome (allow, hold, deny), error code (empty for allow) and policy rule (empty when no rule decided).
# TYPE airlock_decisions_total counter
airlock_decisions_total{code="APPROVAL_REQUIRED",outcome="hold",rule="wire"} 1
`
	assert.NoError(t, testutil.GatherAndCompare(reg, stringsReader(expected), metrics.Decisions))
	assert.Equal(t, 1, testutil.CollectAndCount(tr, metrics.HoldResolution))
	n, err := testutil.GatherAndCount(reg, metrics.GrantToExec)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		switch f.GetName() {
		case metrics.HoldResolution:
			h := f.GetMetric()[0].GetHistogram()
			assert.Equal(t, "expired", f.GetMetric()[0].GetLabel()[0].GetValue())
			assert.Equal(t, 90.0, h.GetSampleSum())
		case metrics.GrantToExec:
			// The claimed event, and the two started events that claim.
			assert.Equal(t, uint64(3), f.GetMetric()[0].GetHistogram().GetSampleCount())
			assert.Equal(t, 0.0, f.GetMetric()[0].GetHistogram().GetSampleSum())
		}
	}
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }
