package metrics_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/consumers/projector"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/archive"
	"github.com/airlock-dev/airlock/internal/livefeed"
	"github.com/airlock-dev/airlock/internal/metrics"
	"github.com/airlock-dev/airlock/internal/results"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/nats-io/nuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixture is metrics over a real server and store, with a projector that
// is never run: whatever is published to the ops stream stays unapplied.
type fixture struct {
	archived *projector.Archived
	n        *testenv.NATS
	p        *projector.Projector
	m        *metrics.Metrics
	audit    bool
	stopped  error
}

func newFixture(t *testing.T, maxLag uint64) *fixture {
	return newFixtureApplied(t, maxLag, 0)
}

// newFixtureApplied starts from a projection that applied the stream up to
// seq.
func newFixtureApplied(t *testing.T, maxLag, seq uint64) *fixture {
	t.Helper()
	n := testenv.StartNATS(t, streams.Config{})
	st, err := store.Open(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	if seq > 0 {
		b := st.NewBatch()
		b.SetApplied(seq)
		require.NoError(t, b.Commit(true))
	}
	p, err := projector.New(projector.Config{JetStream: n.JetStream, Store: st})
	require.NoError(t, err)
	f := &fixture{n: n, p: p, audit: true}
	live, err := livefeed.New(livefeed.Config{JetStream: n.JetStream, Mode: livefeed.On})
	require.NoError(t, err)
	live.Wanted()
	own, err := results.DeploymentKey(t.TempDir())
	require.NoError(t, err)
	eraser, err := projector.NewEraser(projector.EraserConfig{
		JetStream: n.JetStream, Store: st, Results: results.New(n.JetStream, results.DeploymentKeys{Opener: own}, own, nil),
	})
	require.NoError(t, err)
	// The archive's counts come from a projector of their own, with an
	// archive, its purger and its settles.
	ap, err := projector.New(projector.Config{JetStream: n.JetStream, Store: st, Archive: archive.New(n.JetStream)})
	require.NoError(t, err)
	purger, err := projector.NewOpsPurger(projector.OpsPurgerConfig{JetStream: n.JetStream, Store: st, Projector: ap})
	require.NoError(t, err)
	f.archived = projector.NewArchived(ap, st, n.JetStream, 0)
	f.m, err = metrics.New(metrics.Config{
		Store: st, Projector: p, JetStream: n.JetStream, Transitions: metrics.NewTransitions(), MaxLag: maxLag, Live: live,
		Results:     eraser,
		Archive:     archiveStats{ap, purger, f.archived},
		AuditStatus: func() (bool, string) { return f.audit, "test" },
		Running:     func() error { return f.stopped },
		Timeout:     500 * time.Millisecond,
	})
	require.NoError(t, err)
	return f
}

// archiveStats joins the archive's counts, as serve does.
type archiveStats struct {
	*projector.Projector
	*projector.OpsPurger
	*projector.Archived
}

// publish appends n events to the ops stream (the projector is not
// running, so they are all lag).
func (f *fixture) publish(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		ev, err := events.NewEventRaw(events.TypeModeSet, "test", "", nuid.Next(), []byte(fmt.Sprintf(`{"i":%d}`, i)))
		require.NoError(t, err)
		_, err = f.n.JetStream.PublishMsg(context.Background(), events.Encode(events.ModeSubject("w"), ev))
		require.NoError(t, err)
	}
}

func failing(r metrics.Readiness) []string {
	var out []string
	for _, c := range r.Checks {
		if !c.OK {
			out = append(out, c.Name)
		}
	}
	return out
}

// Each readiness check fails on its own condition, and only then.
func TestReadinessChecks(t *testing.T) {
	f := newFixture(t, 3)
	ctx := context.Background()
	r := f.m.Ready(ctx)
	assert.True(t, r.Ready, "%+v", r)

	f.publish(t, 3)
	assert.True(t, f.m.Ready(ctx).Ready, "a lag of 3 is within the bound")
	f.publish(t, 1)
	r = f.m.Ready(ctx)
	assert.False(t, r.Ready)
	assert.Equal(t, []string{metrics.CheckProjector}, failing(r))
	assert.Contains(t, r.Checks[2].Detail, "lag 4, bound 3")

	f.audit = false
	assert.Equal(t, []string{metrics.CheckProjector, metrics.CheckAudit}, failing(f.m.Ready(ctx)))
	f.stopped = errors.New("projector: boom")
	assert.Equal(t, []string{metrics.CheckRunning, metrics.CheckProjector, metrics.CheckAudit}, failing(f.m.Ready(ctx)))
	f.audit, f.stopped = true, nil

	// JetStream gone: neither it nor the lag can be read.
	f.n.Server.Shutdown()
	f.n.Server.WaitForShutdown()
	start := time.Now()
	r = f.m.Ready(ctx)
	assert.Less(t, time.Since(start), 5*time.Second, "bounded by the timeout")
	assert.Equal(t, []string{metrics.CheckJetStream, metrics.CheckProjector}, failing(r))
}

// A projection ahead of its stream (the stream lost its tail) is not
// ready, though the lag reads 0.
func TestNotReadyWhenProjectionIsAhead(t *testing.T) {
	f := newFixtureApplied(t, 1000, 5)
	f.publish(t, 2)
	r := f.m.Ready(context.Background())
	assert.Equal(t, []string{metrics.CheckProjector}, failing(r))
	assert.Contains(t, r.Checks[2].Detail, "applied 5 is beyond the stream's last sequence 2")
	// The stream catching up does not make the loss go away: the events
	// stored again under sequences 3 to 5 are never applied.
	f.publish(t, 3)
	r = f.m.Ready(context.Background())
	assert.Equal(t, []string{metrics.CheckProjector}, failing(r))
	assert.Contains(t, r.Checks[2].Detail, "applied 5 is beyond the stream's last sequence 2")
}

// A projector applying at the tail of a busy stream is never taken for
// one ahead of it: the applied sequence is read before the stream's last.
func TestReadyUnderLoadIsNeverAhead(t *testing.T) {
	f := newFixture(t, 1_000_000)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.p.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	stop := make(chan struct{})
	published := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				published <- nil
				return
			default:
			}
			ev, err := events.NewEventRaw(events.TypeModeSet, "test", "", nuid.Next(), []byte(fmt.Sprintf(`{"i":%d}`, i)))
			if err == nil {
				_, err = f.n.JetStream.PublishMsg(ctx, events.Encode(events.ModeSubject("w"), ev))
			}
			if err != nil {
				published <- err
				return
			}
		}
	}()
	deadline := time.Now().Add(2 * time.Second)
	checks := 0
	for time.Now().Before(deadline) {
		r := f.m.Ready(ctx)
		require.True(t, r.Ready, "%+v", r)
		checks++
	}
	close(stop)
	require.NoError(t, <-published)
	assert.Greater(t, f.p.Applied(), uint64(0), "the projector was applying")
	t.Logf("%d readiness checks while the projector applied %d messages", checks, f.p.Applied())
}

// After Close, scrapes and readiness read nothing of the store (which may
// be closed next).
func TestClosedMetricsReadNothing(t *testing.T) {
	f := newFixture(t, 1000)
	f.m.Close()
	f.m.Close()
	r := f.m.Ready(context.Background())
	assert.False(t, r.Ready)
	families, err := f.m.Registry().Gather()
	require.NoError(t, err)
	for _, fam := range families {
		assert.NotEqual(t, metrics.OpsByState, fam.GetName(), "no stored state after Close")
	}
}

// /readyz answers 503 with the checks when not ready, and /metrics still
// answers (without the stream gauges) when JetStream does not.
func TestHandlerWhenNotReady(t *testing.T) {
	f := newFixture(t, 1)
	f.publish(t, 2)
	srv := httptest.NewServer(f.m.Handler())
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/readyz")
	require.NoError(t, err)
	var r metrics.Readiness
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&r))
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, []string{metrics.CheckProjector}, failing(r))

	families, err := f.m.Registry().Gather()
	require.NoError(t, err)
	values := map[string]float64{}
	for _, fam := range families {
		if len(fam.GetMetric()) == 1 && fam.GetMetric()[0].GetGauge() != nil {
			values[fam.GetName()] = fam.GetMetric()[0].GetGauge().GetValue()
		}
	}
	assert.Equal(t, 2.0, values[metrics.ProjectorLag])
	assert.Equal(t, 0.0, values[metrics.Ready])

	f.n.Server.Shutdown()
	f.n.Server.WaitForShutdown()
	resp, err = http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = http.Get(srv.URL + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// Config.Validate names what is missing.
func TestConfigRequiresSources(t *testing.T) {
	_, err := metrics.New(metrics.Config{})
	require.Error(t, err)
}

// The archive's settles are counted by how they were answered: with a
// read of the ops floor, or by the projection alone.
func TestArchiveSettlesAreCounted(t *testing.T) {
	f := newFixture(t, 1000)
	ctx := context.Background()
	value := func(read string) float64 {
		families, err := f.m.Registry().Gather()
		require.NoError(t, err)
		for _, fam := range families {
			if fam.GetName() != metrics.ArchiveSettles {
				continue
			}
			for _, m := range fam.GetMetric() {
				if m.GetLabel()[0].GetValue() == read {
					return m.GetCounter().GetValue()
				}
			}
		}
		t.Fatalf("%s{read=%q} not exported", metrics.ArchiveSettles, read)
		return 0
	}
	require.NoError(t, f.archived.Settle(ctx, time.Now(), 1)) // nothing below it
	require.NoError(t, f.archived.Settle(ctx, time.Now(), 0)) // unknown: read (no floor stored)
	require.NoError(t, f.archived.Settle(ctx, time.Now(), 9)) // past the projection: read
	assert.Equal(t, 1.0, value("no"))
	assert.Equal(t, 2.0, value("yes"))
}
