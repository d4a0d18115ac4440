package metrics

import (
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/prometheus/client_golang/prometheus"
)

// Bucket bounds, in seconds, of the histograms.
var (
	// holdBuckets span an approver who answers at once to one who takes
	// a day.
	holdBuckets = []float64{0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400}
	// grantBuckets: from a grant to the claim is the gate and an executor
	// picking the op up, milliseconds when healthy.
	grantBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	// execBuckets span an echo to a five-minute command.
	execBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
)

// Transitions counts what the projector applied: it is the projector's
// Observer. Its methods are safe for concurrent use.
type Transitions struct {
	events         *prometheus.CounterVec
	decisions      *prometheus.CounterVec
	rejected       *prometheus.CounterVec
	executions     *prometheus.CounterVec
	holdResolution *prometheus.HistogramVec
	grantToExec    prometheus.Histogram
	execDuration   *prometheus.HistogramVec
}

// NewTransitions returns the transition metrics, not yet registered.
func NewTransitions() *Transitions {
	return &Transitions{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: Events,
			Help: "Events the projector applied, by type (the short name: decided, held, granted, ...).",
		}, []string{"type"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: Decisions,
			Help: "First decisions on requests, by outcome (allow, hold, deny), error code (empty for allow) and policy rule (empty when no rule decided).",
		}, []string{"outcome", "code", "rule"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: Rejected,
			Help: "Requests the gate refused as bad input, by error code.",
		}, []string{"code"}),
		executions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: Executions,
			Help: "Executions that ended, by tool and outcome (completed, failed, ambiguous).",
		}, []string{"tool", "outcome"}),
		holdResolution: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    HoldResolution,
			Help:    "Time from hold to resolution, by resolution (granted, denied, expired).",
			Buckets: holdBuckets,
		}, []string{"resolution"}),
		grantToExec: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    GrantToExec,
			Help:    "Time from a hold's grant to an executor's claim of the op.",
			Buckets: grantBuckets,
		}),
		execDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    ExecDuration,
			Help:    "Time from an executor's claim to the op's outcome, by tool and outcome.",
			Buckets: execBuckets,
		}, []string{"tool", "outcome"}),
	}
}

func (e *Transitions) collectors() []prometheus.Collector {
	return []prometheus.Collector{e.events, e.decisions, e.rejected, e.executions, e.holdResolution, e.grantToExec, e.execDuration}
}

// Applied counts committed transitions (a consumers/projector.Observer).
func (e *Transitions) Applied(ts []events.Transition) {
	for i := range ts {
		e.apply(&ts[i])
	}
}

func (e *Transitions) apply(t *events.Transition) {
	e.events.WithLabelValues(t.Type.Short()).Inc()
	if r, ok := t.Data.(*events.Rejected); ok {
		e.rejected.WithLabelValues(string(r.Code)).Inc()
		return
	}
	switch d := t.Data.(type) {
	case *events.Decided:
		if t.From == events.StateNew {
			e.decisions.WithLabelValues(string(policy.Allow), "", d.Rule).Inc()
		}
	case *events.Held:
		e.decisions.WithLabelValues(string(policy.Hold), string(events.CodeApprovalRequired), d.Rule).Inc()
	case *events.Denied:
		if t.From == events.StateNew {
			e.decisions.WithLabelValues(string(policy.Deny), string(d.Code), d.Rule).Inc()
		}
	case *events.Started:
		if d.Decision != nil && t.From == events.StateNew {
			// Allowed and started at once (ADR 0025).
			e.decisions.WithLabelValues(string(policy.Allow), "", d.Decision.Rule).Inc()
		}
		// A started event that makes a claim: of a decided op, or of a
		// granted op that a gate's process started itself (ADR 0029).
		if (t.From == events.StateReady || t.From == events.StateGranted) && !t.Granted.IsZero() {
			e.grantToExec.Observe(seconds(t.At.Sub(t.Granted)))
		}
	case *events.Claimed:
		if t.From == events.StateReady && !t.Granted.IsZero() {
			e.grantToExec.Observe(seconds(t.At.Sub(t.Granted)))
		}
	}
	if t.From == events.StateHeld && t.To != events.StateHeld {
		e.holdResolution.WithLabelValues(string(t.To)).Observe(seconds(t.At.Sub(t.Since)))
	}
	if t.From == events.StateExecuting {
		switch t.To {
		case events.StateCompleted, events.StateFailed, events.StateAmbiguous:
			e.executions.WithLabelValues(t.Tool, string(t.To)).Inc()
			e.execDuration.WithLabelValues(t.Tool, string(t.To)).Observe(seconds(t.At.Sub(t.Since)))
		}
	}
}

// seconds is d in seconds, never negative (stored times of one op come
// from one server, but a cluster's leaders may disagree by a little).
func seconds(d time.Duration) float64 {
	if d < 0 {
		return 0
	}
	return d.Seconds()
}

// Describe and Collect make Transitions a prometheus.Collector of all its
// metrics.
func (e *Transitions) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range e.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (e *Transitions) Collect(ch chan<- prometheus.Metric) {
	for _, c := range e.collectors() {
		c.Collect(ch)
	}
}
