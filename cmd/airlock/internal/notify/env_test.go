package notify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/notify"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// env is an embedded NATS server with Airlock's streams and a writer of
// op events, as the gate appends them.
type env struct {
	t    *testing.T
	nats *testenv.NATS
	w    *oplog.Writer
	ops  jetstream.Stream
	n    int
}

func newEnv(t *testing.T) *env {
	t.Helper()
	n := testenv.StartNATS(t, streams.Config{})
	ops, err := n.JetStream.Stream(context.Background(), streams.Ops)
	require.NoError(t, err)
	return &env{t: t, nats: n, w: testenv.Writer(t, n.JetStream), ops: ops}
}

// secret is in every request's args, which no notification may carry.
const secret = "s3cr3t-token"

// hold stores a request of agent bot in ws, whose args hold secret, and
// appends its op's held event, as the gate does; it returns the event.
func (e *env) hold(ws string) *events.Held {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e.n++
	req := &events.Request{Workspace: ws, Agent: "bot", Tool: "exec",
		Args: json.RawMessage(fmt.Sprintf(`{"argv":["rm","-rf","/srv/%d"],"env":{"TOKEN":%q}}`, e.n, secret))}
	require.NoError(e.t, req.Validate())
	fp, op := req.Identity()
	body, err := json.Marshal(req)
	require.NoError(e.t, err)
	ack, err := e.nats.JetStream.PublishMsg(ctx, events.NewMessage(events.RequestSubject(ws, "bot"), events.TypeRequested, "test", "", fp, body))
	require.NoError(e.t, err)
	digest := events.ArgsDigest(req.Args)
	h := &events.Held{
		OpHeader: events.OpHeader{OpID: op, Workspace: ws},
		Request: &events.Summary{Fingerprint: fp, Agent: "bot", Tool: "exec", Class: string(events.ClassExec),
			ArgsDigest: digest, RequestSeq: ack.Sequence},
		HoldID: events.HoldID(op), ArgsDigest: digest,
		ExpiresAt:  time.Now().Add(15 * time.Minute).UTC(),
		PolicyHash: "sha256:" + fmt.Sprintf("%064x", 1),
		Reason:     "exec runs rm, an approver must agree",
		Rule:       "hold-exec-rm", Mode: "auto",
	}
	_, err = e.w.Start(oplog.Op{Workspace: ws, ID: op, Tool: "exec"}, 0, events.TypeHeld, "airlock/gate", h).Wait(ctx, e.ops)
	require.NoError(e.t, err)
	return h
}

// settled waits until the notifiers' consumer has nothing pending or in
// hand: every hold appended so far has been acked, and none is sent
// again.
func (e *env) settled() {
	e.t.Helper()
	ctx := context.Background()
	require.Eventually(e.t, func() bool {
		c, err := e.nats.JetStream.Consumer(ctx, streams.Ops, notify.Consumer)
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}, 10*time.Second, 5*time.Millisecond)
}

// config is a notifier's config for tests: prod's holds go to hook, no
// other workspace has a webhook; retries are quick.
func (e *env) config(hook *hook, reg *prometheus.Registry) notify.Config {
	c := notify.Config{
		JetStream: e.nats.JetStream,
		Webhook: func(ws string) string {
			if ws == "prod" {
				return hook.URL + "/T000/B000/XXX?token=hooksecret"
			}
			return ""
		},
		Backoff:    time.Millisecond,
		MaxBackoff: 5 * time.Millisecond,
		Timeout:    5 * time.Second,
	}
	if reg != nil {
		c.Registerer = reg
	}
	return c
}

// run starts a notifier and waits until it is ready; it stops at the end
// of the test, or when stop is called.
func run(t *testing.T, cfg notify.Config) (stop func()) {
	t.Helper()
	n, err := notify.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})
	t.Cleanup(stop)
	select {
	case <-n.Ready():
	case err := <-done:
		t.Fatalf("Run returned before it was ready: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the notifier is not ready")
	}
	return stop
}

// received is one request a hook received.
type received struct {
	method, path, query string
	header              http.Header
	body                []byte
}

// hook is a webhook endpoint; answer writes the answer to its i-th
// request (from 0).
type hook struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []received
}

func newHook(t *testing.T, answer func(i int, w http.ResponseWriter, r *http.Request)) *hook {
	t.Helper()
	h := &hook{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		h.mu.Lock()
		i := len(h.reqs)
		h.reqs = append(h.reqs, received{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), body})
		h.mu.Unlock()
		answer(i, w, r)
	}))
	t.Cleanup(h.Close)
	return h
}

func status(code int) func(int, http.ResponseWriter, *http.Request) {
	return func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) }
}

// received lists the requests so far; the caller owns the slice.
func (h *hook) received() []received {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]received(nil), h.reqs...)
}

func (h *hook) count() int { return len(h.received()) }

// waitFor waits until the hook has received n requests.
func (h *hook) waitFor(t *testing.T, n int) []received {
	t.Helper()
	require.Eventually(t, func() bool { return h.count() >= n }, 10*time.Second, 5*time.Millisecond, "%d requests", n)
	return h.received()
}

// value is the value of the counter, or the sample count of the
// histogram, name with labels (name=value pairs) in reg; 0 when absent.
func value(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Errorf("gather: %v", err)
		return -1
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue metrics
				}
			}
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// eventually waits until the metric has value v.
func eventually(t *testing.T, reg *prometheus.Registry, v float64, name string, labels ...string) {
	t.Helper()
	require.Eventually(t, func() bool { return value(t, reg, name, labels...) == v }, 10*time.Second, 5*time.Millisecond,
		"%s%v = %v", name, labels, v)
}
