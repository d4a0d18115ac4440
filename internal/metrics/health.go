package metrics

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check is one readiness check's verdict.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// Readiness is what /readyz answers.
type Readiness struct {
	Ready  bool    `json:"ready"`
	Checks []Check `json:"checks"`
}

// The readiness checks, in the order Ready runs them.
const (
	CheckRunning   = "running"   // every part of the process runs
	CheckJetStream = "jetstream" // the ops stream answers within the timeout
	CheckProjector = "projector" // the projector is within MaxLag of the stream
	CheckAudit     = "audit"     // the audit log verified at start
)

// Ready runs the readiness checks. The process is ready when every part
// runs, JetStream answers, the projector is at most MaxLag messages behind
// the ops stream, and the audit log verified at start.
func (m *Metrics) Ready(ctx context.Context) Readiness {
	if !m.open() {
		return Readiness{Checks: []Check{{Name: CheckRunning, Detail: "shutting down"}}}
	}
	defer m.mu.RUnlock()
	return m.readiness(m.readOps(ctx))
}

// readiness runs the checks on a reading of the ops stream.
func (m *Metrics) readiness(ops opsReading) Readiness {
	var r Readiness
	add := func(name string, ok bool, detail string) {
		r.Checks = append(r.Checks, Check{Name: name, OK: ok, Detail: detail})
	}
	if m.cfg.Running == nil {
		add(CheckRunning, true, "")
	} else if err := m.cfg.Running(); err != nil {
		add(CheckRunning, false, err.Error())
	} else {
		add(CheckRunning, true, "")
	}
	last, applied, lag, err := ops.state.LastSeq, ops.applied, ops.lag(), ops.err
	if err == nil && applied > last {
		// The stream lost its tail (a power loss without --fsync always,
		// a restored backup): the projection holds what it no longer
		// does, and the events stored under those sequences again will
		// never be applied. That stays true once the stream has caught
		// up, so it is remembered until the process restarts.
		d := fmt.Sprintf("applied %d is beyond the stream's last sequence %d: the stream lost messages the projection holds (see docs/operations.md)", applied, last)
		m.ahead.CompareAndSwap(nil, &d)
	}
	switch ahead := m.ahead.Load(); {
	case err != nil:
		add(CheckJetStream, false, err.Error())
		add(CheckProjector, false, "lag unknown: JetStream did not answer")
	case ahead != nil:
		add(CheckJetStream, true, "")
		add(CheckProjector, false, *ahead)
	default:
		add(CheckJetStream, true, "")
		detail := fmt.Sprintf("applied %d of %d (lag %d, bound %d)", applied, last, lag, m.cfg.MaxLag)
		add(CheckProjector, lag <= m.cfg.MaxLag, detail)
	}
	ok, detail := m.cfg.AuditStatus()
	add(CheckAudit, ok, detail)
	r.Ready = true
	for _, c := range r.Checks {
		r.Ready = r.Ready && c.OK
	}
	return r
}

// Handler serves /metrics (Prometheus text or OpenMetrics), /healthz
// (200 while the process answers) and /readyz (200 when Ready, else 503;
// both with the checks as JSON).
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog: slogAdapter{m}, ErrorHandling: promhttp.ContinueOnError, Timeout: 2 * m.cfg.Timeout,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, req *http.Request) {
		r := m.Ready(req.Context())
		w.Header().Set("Content-Type", "application/json")
		if !r.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(r)
	})
	return mux
}

// slogAdapter logs promhttp's errors.
type slogAdapter struct{ m *Metrics }

func (a slogAdapter) Println(v ...any) {
	a.m.cfg.Logger.Warn("metrics: " + fmt.Sprint(v...))
}
