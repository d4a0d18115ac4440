package app_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/apptest"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/notify"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/metrics"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/producers"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scrape reads url's /metrics in the text format and returns every sample
// as "name{label="value",...}" -> value, labels sorted, empty ones left out.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	out := map[string]float64{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			key := func(suffix string, extra ...string) string {
				var ls []string
				for _, l := range m.GetLabel() {
					if l.GetValue() != "" {
						ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
					}
				}
				ls = append(ls, extra...)
				sort.Strings(ls)
				if len(ls) == 0 {
					return name + suffix
				}
				return name + suffix + "{" + strings.Join(ls, ",") + "}"
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[key("")] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key("")] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[key("_count")] = float64(m.GetHistogram().GetSampleCount())
				out[key("_sum")] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

// only keeps the samples of the families named.
func only(samples map[string]float64, prefixes ...string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range samples {
		name, _, _ := strings.Cut(k, "{")
		for _, p := range prefixes {
			if name == p {
				out[k] = v
			}
		}
	}
	return out
}

// settle waits until every op ended and was scrubbed, the gate handled
// every request, and the projector applied the whole ops stream.
func settle(t *testing.T, a *app.App, ops []string) {
	t.Helper()
	for _, id := range ops {
		op := waitTerminalOrHeld(t, a, id)
		require.NotEqual(t, events.StateNew, op.State)
	}
	ctx := ctxT(t)
	gate, err := a.JetStream.Consumer(ctx, streams.Requests, streams.GateConsumer)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := gate.Info(ctx)
		if err != nil || info.NumAckPending != 0 || info.NumPending != 0 {
			return false
		}
		if pending, err := a.Store.PendingScrubs(nil, 10); err != nil || len(pending) != 0 {
			return false
		}
		_, _, lag, err := a.Metrics.ProjectorLag(ctx)
		return err == nil && lag == 0
	}, 20*time.Second, 20*time.Millisecond)
}

func waitTerminalOrHeld(t *testing.T, a *app.App, id string) *events.Op {
	t.Helper()
	var op *events.Op
	require.Eventually(t, func() bool {
		var err error
		op, err = a.Store.Op(id)
		return err == nil && (op.State.Terminal() || op.State == events.StateHeld)
	}, 20*time.Second, 10*time.Millisecond, "op %s", id)
	return op
}

// TestMetricsAfterScriptedRun runs ops that end every way (auto, held and
// granted, held and denied, still held, denied by policy, failed,
// ambiguous, rejected) and checks the exact counts /metrics reports.
func TestMetricsAfterScriptedRun(t *testing.T) {
	spec := confirmSpec()
	a, counter := holdsApp(t, app.Config{
		// An ops stream that lets ended ops leave for the archive, as
		// serve makes one: the archive's metrics are exported too.
		Streams: streams.Config{PurgeOps: true},
		Policy:  spec, MetricsListen: "127.0.0.1:0", ScrubInterval: 20 * time.Millisecond,
		Tools: app.ToolsConfig{
			Remote:        map[string]string{"remote_echo": "tools.marker", "remote_silent": "tools.silent"},
			RemoteTimeout: 300 * time.Millisecond,
		},
	})
	addr := a.MetricsAddr()
	require.NotEmpty(t, addr)
	svc := connectAs(t, a, authority.ServiceName)
	markerTool(t, svc, "tools.marker")
	silentTool(t, svc, "tools.silent")
	c := agentClient(t, a)
	ap := approverAs(t, a, "approver")

	var ops []string
	submit := func(ws, tool, args string, want events.State) producers.Outcome {
		t.Helper()
		out, err := c.Submit(ctxT(t), events.Request{Workspace: ws, Agent: "agent", Tool: tool, Args: json.RawMessage(args)})
		require.NoError(t, err)
		require.Equal(t, want, out.State, "%s %s: %+v", tool, args, out)
		ops = append(ops, out.OpID)
		return out
	}
	for i := range 3 {
		submit("auto", "echo", fmt.Sprintf(`{"i":%d}`, i), events.StateCompleted)
	}
	submit("auto", "format_disk", `{}`, events.StateDenied)
	submit("auto", "remote_echo", `{"fail":"x"}`, events.StateFailed)
	submit("auto", "remote_silent", `{}`, events.StateAmbiguous)

	var holds []producers.Outcome
	for i := range 4 {
		h := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(fmt.Sprintf(`{"h":%d}`, i))})
		waitHeldInProjection(t, a, h.OpID)
		holds = append(holds, h)
		ops = append(ops, h.OpID)
	}
	for _, h := range holds[:2] {
		_, err := ap.Grant(ctxT(t), h.HoldID, h.ArgsDigest, "fine")
		require.NoError(t, err)
		assert.Equal(t, events.StateCompleted, waitTerminal(t, a, h.OpID).State)
	}
	_, err := ap.Deny(ctxT(t), holds[2].HoldID, holds[2].ArgsDigest, "no")
	require.NoError(t, err)
	assert.Equal(t, events.StateDenied, waitTerminal(t, a, holds[2].OpID).State)
	// holds[3] stays pending.

	// One request the gate rejects: its body names another workspace.
	js, err := jetstream.New(connectAs(t, a, "agent"))
	require.NoError(t, err)
	ev, err := events.NewEventRaw(events.TypeRequested, "test", "", nuid.Next(),
		[]byte(`{"workspace":"elsewhere","agent":"agent","tool":"echo","args":{}}`))
	require.NoError(t, err)
	_, err = js.PublishMsg(ctxT(t), events.Encode(events.RequestSubject("auto", "agent"), ev))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return scrape(t, addr)[`airlock_rejected_total{code="SUBJECT_MISMATCH"}`] == 1
	}, 10*time.Second, 20*time.Millisecond)

	settle(t, a, ops)
	got := scrape(t, addr)

	// Every first event was checked against the archive: by a read of
	// the ops floor, or by the projection alone.
	assert.Positive(t, got[`airlock_archive_settles_total{read="yes"}`]+got[`airlock_archive_settles_total{read="no"}`])

	assert.Equal(t, map[string]float64{
		`airlock_ops{state="ready"}`:     0,
		`airlock_ops{state="held"}`:      1,
		`airlock_ops{state="granted"}`:   0,
		`airlock_ops{state="executing"}`: 0,
		`airlock_ops{state="completed"}`: 5,
		`airlock_ops{state="failed"}`:    1,
		`airlock_ops{state="denied"}`:    2,
		`airlock_ops{state="expired"}`:   0,
		`airlock_ops{state="ambiguous"}`: 1,
		`airlock_holds_pending`:          1,
	}, only(got, metrics.OpsByState, metrics.HoldsPending))

	assert.Equal(t, map[string]float64{
		`airlock_decisions_total{outcome="allow"}`:                           5,
		`airlock_decisions_total{code="APPROVAL_REQUIRED",outcome="hold"}`:   4,
		`airlock_decisions_total{code="CAPABILITY_DENIED",outcome="deny"}`:   1,
		`airlock_rejected_total{code="SUBJECT_MISMATCH"}`:                    1,
		`airlock_executions_total{outcome="completed",tool="echo"}`:          3,
		`airlock_executions_total{outcome="completed",tool="count"}`:         2,
		`airlock_executions_total{outcome="failed",tool="remote_echo"}`:      1,
		`airlock_executions_total{outcome="ambiguous",tool="remote_silent"}`: 1,
	}, only(got, metrics.Decisions, metrics.Rejected, metrics.Executions))

	assert.Equal(t, map[string]float64{
		`airlock_hold_resolution_seconds_count{resolution="granted"}`:                        2,
		`airlock_hold_resolution_seconds_count{resolution="denied"}`:                         1,
		`airlock_grant_to_execution_seconds_count`:                                           2,
		`airlock_execution_duration_seconds_count{outcome="completed",tool="echo"}`:          3,
		`airlock_execution_duration_seconds_count{outcome="completed",tool="count"}`:         2,
		`airlock_execution_duration_seconds_count{outcome="failed",tool="remote_echo"}`:      1,
		`airlock_execution_duration_seconds_count{outcome="ambiguous",tool="remote_silent"}`: 1,
	}, only(got, metrics.HoldResolution+"_count", metrics.GrantToExec+"_count", metrics.ExecDuration+"_count"))
	// The silent tool's call took at least its timeout.
	assert.GreaterOrEqual(t, got[`airlock_execution_duration_seconds_sum{outcome="ambiguous",tool="remote_silent"}`], 0.3)

	// Every event the projector applied, by type: the 5 ops allowed at
	// once were started by the gate's own process, their decision in
	// their started event (ADR 0025), and so were the 2 granted ops when
	// they resumed (ADR 0029); the policy loaded at start.
	assert.Equal(t, map[string]float64{
		`airlock_events_total{type="loaded"}`:    1,
		`airlock_events_total{type="started"}`:   7,
		`airlock_events_total{type="held"}`:      4,
		`airlock_events_total{type="granted"}`:   2,
		`airlock_events_total{type="denied"}`:    2,
		`airlock_events_total{type="completed"}`: 5,
		`airlock_events_total{type="failed"}`:    1,
		`airlock_events_total{type="ambiguous"}`: 1,
		`airlock_events_total{type="rejected"}`:  1,
	}, only(got, metrics.Events))

	assert.Equal(t, 0.0, got[metrics.ProjectorLag])
	assert.Equal(t, 0.0, got[metrics.Anomalies])
	assert.Equal(t, 1.0, got[metrics.AuditVerified])
	assert.Equal(t, 1.0, got[metrics.Ready])
	assert.Greater(t, got[metrics.HoldOldestAge], 0.0)
	last := got[`airlock_stream_last_sequence{stream="AIRLOCK_OPS"}`]
	assert.Equal(t, last, got[metrics.ProjectorSeq])
	assert.Equal(t, last, got[metrics.AuditLeaves], "one leaf per ops stream message")
	assert.LessOrEqual(t, got[metrics.AuditSigned], got[metrics.AuditLeaves])

	// The samples equal what the registry holds, and the names the
	// registry exports are exactly those the package declares.
	families, err := a.Metrics.Registry().Gather()
	require.NoError(t, err)
	var exported []string
	for _, f := range families {
		// The notifier's families are its own package's (notify).
		if name := f.GetName(); strings.HasPrefix(name, "airlock_") && !slices.Contains([]string{notify.Deliveries, notify.Attempts, notify.DeliverySeconds}, name) {
			exported = append(exported, name)
		}
	}
	assert.Subset(t, metrics.Names(), exported)
	var missing []string
	for _, n := range metrics.Names() {
		if !slices.Contains(exported, n) {
			missing = append(missing, n)
		}
	}
	// No message was given up on (the gate's erasures of rejected requests
	// are advisories, but not terminations).
	assert.ElementsMatch(t, []string{metrics.MaxDeliveries, metrics.Terminated}, missing)
}

// TestHealthAndReadiness: /healthz answers while the process runs;
// /readyz names each check, and says not ready while the projector is
// behind by more than the bound.
func TestHealthAndReadiness(t *testing.T) {
	a := apptest.StartApp(t, app.Config{MetricsListen: "127.0.0.1:0", ReadyMaxLag: 5})
	base := "http://" + a.MetricsAddr()
	resp, err := http.Get(base + "/healthz")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "ok\n", string(body))

	readyz := func() (int, metrics.Readiness) {
		resp, err := http.Get(base + "/readyz")
		require.NoError(t, err)
		defer resp.Body.Close()
		var r metrics.Readiness
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&r))
		return resp.StatusCode, r
	}
	require.Eventually(t, func() bool { code, _ := readyz(); return code == http.StatusOK }, 10*time.Second, 20*time.Millisecond)
	_, r := readyz()
	assert.True(t, r.Ready)
	var names []string
	for _, c := range r.Checks {
		names = append(names, c.Name)
		assert.True(t, c.OK, c.Name)
	}
	assert.Equal(t, []string{metrics.CheckRunning, metrics.CheckJetStream, metrics.CheckProjector, metrics.CheckAudit}, names)

	_, _, lag, err := a.Metrics.ProjectorLag(ctxT(t))
	require.NoError(t, err)
	assert.Equal(t, uint64(0), lag)
}

// TestAdvisoriesNameTheOp: a message a consumer terminates, and one that
// reaches a consumer's maximum deliveries, are counted and logged with
// their op.
func TestAdvisoriesNameTheOp(t *testing.T) {
	var logs syncBuffer
	a := apptest.StartApp(t, app.Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	c, _ := apptest.Client(t, a.ClientURL(), producers.WithWait(10*time.Second))
	out, err := c.Submit(ctxT(t), events.Request{Workspace: "w", Agent: "a", Tool: "echo", Args: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.Equal(t, events.StateCompleted, out.State)

	// An executor terminates a decided event that does not decode.
	bogus := "op_" + strings.Repeat("ab", 16)
	ev, err := events.NewEventRaw(events.TypeDecided, "test", "", nuid.Next(), []byte(`{"not":"a decision"}`))
	require.NoError(t, err)
	_, err = a.JetStream.PublishMsg(ctxT(t), events.Encode(events.OpEventSubject("w", bogus, "echo", events.TypeDecided), ev))
	require.NoError(t, err)

	// A consumer that gives up after one delivery, on the real op's
	// events: the first one is not acked.
	ctx := ctxT(t)
	cons, err := a.JetStream.CreateConsumer(ctx, streams.Ops, jetstream.ConsumerConfig{
		Durable: "probe", FilterSubject: events.OpEventSubject("w", out.OpID, "echo", events.TypeStarted), AckPolicy: jetstream.AckExplicitPolicy,
		MaxDeliver: 1, AckWait: 100 * time.Millisecond,
	})
	require.NoError(t, err)
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	for m := range batch.Messages() {
		require.NoError(t, m.Nak())
	}
	require.NoError(t, batch.Error())
	// JetStream finds the message out of deliveries when it would deliver
	// it again: to the next pull.
	batch, err = cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
	require.NoError(t, err)
	for m := range batch.Messages() {
		t.Fatalf("redelivered past its maximum: %s", m.Subject())
	}

	counter := func(name, consumer string) float64 {
		families, err := a.Metrics.Registry().Gather()
		require.NoError(t, err)
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["stream"] == streams.Ops && (consumer == "" || labels["consumer"] == consumer) {
					return m.GetCounter().GetValue()
				}
			}
		}
		return 0
	}
	require.Eventually(t, func() bool {
		return counter(metrics.Terminated, "") == 1 && counter(metrics.MaxDeliveries, "probe") == 1
	}, 10*time.Second, 20*time.Millisecond, "terminated %v, max deliveries %v",
		counter(metrics.Terminated, ""), counter(metrics.MaxDeliveries, "probe"))

	var sawTerm, sawMax bool
	for _, line := range bytes.Split(logs.Bytes(), []byte("\n")) {
		var rec map[string]any
		if json.Unmarshal(line, &rec) != nil {
			continue
		}
		msg, _ := rec["msg"].(string)
		switch {
		case strings.Contains(msg, "terminated by its consumer"):
			sawTerm = rec["op"] == bogus && rec["ws"] == "w" && rec["stream"] == streams.Ops
		case strings.Contains(msg, "maximum deliveries"):
			sawMax = rec["op"] == out.OpID && rec["consumer"] == "probe"
		}
	}
	assert.True(t, sawTerm, "the terminated message's op is logged:\n%s", logs.String())
	assert.True(t, sawMax, "the undeliverable message's op is logged:\n%s", logs.String())
}

// syncBuffer is a bytes.Buffer safe for the logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

func (s *syncBuffer) String() string { return string(s.Bytes()) }
