package notify_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/notify"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A hold of a workspace with a webhook reaches it as chat tools take it:
// a text line and the hold's fields, with the link Link made.
func TestHoldReachesTheWebhook(t *testing.T) {
	e := newEnv(t)
	hook := newHook(t, status(http.StatusOK))
	reg := prometheus.NewRegistry()
	type linkCall struct {
		ws, hold string
		expires  time.Time
	}
	var mu sync.Mutex
	var links []linkCall
	cfg := e.config(hook, reg)
	cfg.Link = func(_ context.Context, ws, holdID string, expires time.Time) (string, error) {
		mu.Lock()
		links = append(links, linkCall{ws, holdID, expires})
		mu.Unlock()
		return "https://airlock.example.com/inbox/" + ws + "/" + holdID + "?a=1&b=2", nil
	}
	run(t, cfg)

	h := e.hold("prod")
	got := hook.waitFor(t, 1)
	require.Len(t, got, 1)
	r := got[0]
	assert.Equal(t, http.MethodPost, r.method)
	assert.Equal(t, "/T000/B000/XXX", r.path)
	assert.Equal(t, "token=hooksecret", r.query)
	assert.Equal(t, "application/json", r.header.Get("Content-Type"))
	assert.Equal(t, "airlock", r.header.Get("User-Agent"))

	link := "https://airlock.example.com/inbox/prod/" + h.HoldID + "?a=1&b=2"
	want, err := json.Marshal(map[string]any{
		"text": "Airlock: " + h.HoldID + " in prod: agent bot wants exec (exec): exec runs rm, an approver must agree. Review: " + link,
		"airlock": map[string]any{
			"workspace": "prod", "hold_id": h.HoldID, "op_id": h.OpID, "agent": "bot", "tool": "exec", "class": "exec",
			"reason": "exec runs rm, an approver must agree", "args_digest": h.ArgsDigest,
			"expires_at": h.ExpiresAt.Format(time.RFC3339Nano), "link": link,
		},
	})
	require.NoError(t, err)
	assert.JSONEq(t, string(want), string(r.body))
	assert.Contains(t, string(r.body), "?a=1&b=2", "the link is not HTML-escaped")

	mu.Lock()
	assert.Equal(t, []linkCall{{"prod", h.HoldID, h.ExpiresAt}}, links)
	mu.Unlock()

	eventually(t, reg, 1, notify.Deliveries, "ws", "prod", "outcome", notify.Delivered)
	assert.Equal(t, 1.0, value(t, reg, notify.Attempts, "outcome", notify.AttemptOK))
	assert.Equal(t, 0.0, value(t, reg, notify.Attempts, "outcome", notify.AttemptRetry))
	assert.Equal(t, 1.0, value(t, reg, notify.DeliverySeconds, "outcome", notify.Delivered))
	e.settled()
	assert.Equal(t, 1, hook.count())
}

// No notification carries argument text: the held event has digests only,
// and the notifier reads nothing else.
func TestNoArgsInTheNotification(t *testing.T) {
	e := newEnv(t)
	hook := newHook(t, status(http.StatusNoContent))
	run(t, e.config(hook, nil))
	for range 3 {
		e.hold("prod")
	}
	for _, r := range hook.waitFor(t, 3) {
		assert.NotContains(t, string(r.body), secret)
		assert.NotContains(t, string(r.body), "TOKEN")
		assert.NotContains(t, string(r.body), "/srv/")
		assert.NotContains(t, string(r.body), "argv")
		var m notify.Message
		require.NoError(t, json.Unmarshal(r.body, &m))
		assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, m.Airlock.ArgsDigest)
	}
}

// When Link fails, or there is none, the notification goes without one.
func TestNotifiedWithoutALink(t *testing.T) {
	for _, tc := range []struct {
		name string
		link func(context.Context, string, string, time.Time) (string, error)
	}{
		{"no Link", nil},
		{"Link fails", func(context.Context, string, string, time.Time) (string, error) {
			return "", errors.New("inbox down")
		}},
		{"link too long", func(context.Context, string, string, time.Time) (string, error) {
			return "https://airlock.example.com/" + strings.Repeat("x", notify.MaxLinkBytes), nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			hook := newHook(t, status(http.StatusOK))
			cfg := e.config(hook, nil)
			cfg.Link = tc.link
			run(t, cfg)
			h := e.hold("prod")
			r := hook.waitFor(t, 1)[0]
			var m struct{ Airlock map[string]any }
			require.NoError(t, json.Unmarshal(r.body, &m))
			assert.NotContains(t, m.Airlock, "link")
			assert.Equal(t, h.HoldID, m.Airlock["hold_id"])
			var msg notify.Message
			require.NoError(t, json.Unmarshal(r.body, &msg))
			assert.Equal(t, "Airlock: "+h.HoldID+" in prod: agent bot wants exec (exec): exec runs rm, an approver must agree.", msg.Text)
		})
	}
}

// 503 twice, then 200: delivered on the third attempt, after two
// retries. A Retry-After longer than MaxBackoff waits MaxBackoff.
func TestRetriedUntilDelivered(t *testing.T) {
	e := newEnv(t)
	hook := newHook(t, func(i int, w http.ResponseWriter, _ *http.Request) {
		if i < 2 {
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	reg := prometheus.NewRegistry()
	run(t, e.config(hook, reg))
	h := e.hold("prod")
	eventually(t, reg, 1, notify.Deliveries, "ws", "prod", "outcome", notify.Delivered)
	assert.Equal(t, 2.0, value(t, reg, notify.Attempts, "outcome", notify.AttemptRetry))
	assert.Equal(t, 1.0, value(t, reg, notify.Attempts, "outcome", notify.AttemptOK))
	assert.Equal(t, 0.0, value(t, reg, notify.Attempts, "outcome", notify.AttemptError))
	e.settled()
	got := hook.received()
	require.Len(t, got, 3)
	for _, r := range got {
		assert.Equal(t, string(got[0].body), string(r.body), "every attempt sends the same message")
		assert.Contains(t, string(r.body), h.HoldID)
	}
}

// A 4xx other than 408 and 429 is a refusal: failed, not retried.
func TestRefusalIsNotRetried(t *testing.T) {
	for _, code := range []int{http.StatusBadRequest, http.StatusNotFound, http.StatusFound} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			e := newEnv(t)
			hook := newHook(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Location", "https://elsewhere.example.com/")
				w.WriteHeader(code)
			})
			reg := prometheus.NewRegistry()
			run(t, e.config(hook, reg))
			e.hold("prod")
			eventually(t, reg, 1, notify.Deliveries, "ws", "prod", "outcome", notify.Failed)
			e.settled()
			assert.Equal(t, 1, hook.count())
			assert.Equal(t, 1.0, value(t, reg, notify.Attempts, "outcome", notify.AttemptError))
			assert.Equal(t, 0.0, value(t, reg, notify.Attempts, "outcome", notify.AttemptRetry))
			assert.Equal(t, 0.0, value(t, reg, notify.Deliveries, "outcome", notify.Delivered))
			assert.Equal(t, 1.0, value(t, reg, notify.DeliverySeconds, "outcome", notify.Failed))
		})
	}
}

// An endpoint that never answers 2xx is dropped after MaxAttempts.
func TestDroppedAfterMaxAttempts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(int, http.ResponseWriter, *http.Request)
	}{
		{"5xx, 408 and 429", func(i int, w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader([]int{http.StatusInternalServerError, http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusBadGateway}[i%4])
		}},
		{"no answer", func(_ int, _ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			hook := newHook(t, tc.answer)
			reg := prometheus.NewRegistry()
			cfg := e.config(hook, reg)
			cfg.MaxAttempts = 4
			cfg.Timeout = 100 * time.Millisecond
			run(t, cfg)
			e.hold("prod")
			eventually(t, reg, 1, notify.Deliveries, "ws", "prod", "outcome", notify.Dropped)
			e.settled()
			assert.Equal(t, 4, hook.count())
			assert.Equal(t, 3.0, value(t, reg, notify.Attempts, "outcome", notify.AttemptRetry))
			assert.Equal(t, 1.0, value(t, reg, notify.Attempts, "outcome", notify.AttemptError))
			assert.Equal(t, 0.0, value(t, reg, notify.Attempts, "outcome", notify.AttemptOK))
			assert.Equal(t, 1.0, value(t, reg, notify.DeliverySeconds, "outcome", notify.Dropped))
		})
	}
}

// A workspace without a webhook sends nothing.
func TestNoWebhookSendsNothing(t *testing.T) {
	e := newEnv(t)
	hook := newHook(t, status(http.StatusOK))
	reg := prometheus.NewRegistry()
	run(t, e.config(hook, reg))
	e.hold("dev")
	e.hold("staging")
	p := e.hold("prod")
	e.hold("dev")
	eventually(t, reg, 1, notify.Deliveries, "ws", "prod", "outcome", notify.Delivered)
	e.settled()
	got := hook.received()
	require.Len(t, got, 1)
	assert.Contains(t, string(got[0].body), p.HoldID)
	assert.Equal(t, 0.0, value(t, reg, notify.Deliveries, "ws", "dev"))
	assert.Equal(t, 1.0, value(t, reg, notify.Attempts, "outcome", notify.AttemptOK))
}

// While no workspace has a webhook, no hold is taken: they wait in the
// consumer, and those still pending are announced once one is set.
func TestNoHoldTakenWithoutAnyWebhook(t *testing.T) {
	e := newEnv(t)
	hook := newHook(t, status(http.StatusOK))
	reg := prometheus.NewRegistry()
	cfg := e.config(hook, reg)
	var active atomic.Bool
	cfg.Active = active.Load
	run(t, cfg)
	h := e.hold("prod")
	e.hold("dev")
	ctx := context.Background()
	c, err := e.nats.JetStream.Consumer(ctx, streams.Ops, notify.Consumer)
	require.NoError(t, err)
	time.Sleep(2 * notify.IdlePoll)
	info, err := c.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), info.NumPending, "both holds wait")
	assert.Zero(t, info.NumAckPending)
	assert.Zero(t, info.Delivered.Consumer, "none was taken")

	active.Store(true) // a policy with a webhook
	eventually(t, reg, 1, notify.Deliveries, "ws", "prod", "outcome", notify.Delivered)
	e.settled()
	got := hook.received()
	require.Len(t, got, 1)
	assert.Contains(t, string(got[0].body), h.HoldID)
}

// A hold that expired before its turn is not announced.
func TestExpiredHoldIsNotSent(t *testing.T) {
	e := newEnv(t)
	hook := newHook(t, status(http.StatusOK))
	reg := prometheus.NewRegistry()
	cfg := e.config(hook, reg)
	cfg.Clock = func() time.Time { return time.Now().Add(time.Hour) }
	run(t, cfg)
	e.hold("prod")
	eventually(t, reg, 1, notify.Deliveries, "ws", "prod", "outcome", notify.Expired)
	e.settled()
	assert.Equal(t, 0, hook.count())
}

// Two notifiers on one stream (two Airlock processes) announce each hold
// once.
func TestTwoNotifiersAnnounceEachHoldOnce(t *testing.T) {
	e := newEnv(t)
	hook := newHook(t, status(http.StatusOK))
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	for _, reg := range regs {
		run(t, e.config(hook, reg))
	}
	const holds = 20
	want := map[string]bool{}
	for range holds {
		want[e.hold("prod").HoldID] = true
	}
	hook.waitFor(t, holds)
	e.settled()
	got := map[string]int{}
	for _, r := range hook.received() {
		var m notify.Message
		require.NoError(t, json.Unmarshal(r.body, &m))
		got[m.Airlock.HoldID]++
	}
	assert.Len(t, got, holds)
	for id, n := range got {
		assert.True(t, want[id], id)
		assert.Equal(t, 1, n, "%s announced %d times", id, n)
	}
	var delivered float64
	for _, reg := range regs {
		delivered += value(t, reg, notify.Deliveries, "ws", "prod", "outcome", notify.Delivered)
	}
	assert.Equal(t, float64(holds), delivered)
}

// A delivery in flight when its notifier stops is left unacked: the next
// notifier on the stream sends it.
func TestStoppedMidDeliveryIsSentByTheNext(t *testing.T) {
	e := newEnv(t)
	hook := newHook(t, func(i int, w http.ResponseWriter, r *http.Request) {
		if i == 0 {
			<-r.Context().Done() // the first notifier stops while it waits
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	first := prometheus.NewRegistry()
	stop := run(t, e.config(hook, first))
	h := e.hold("prod")
	hook.waitFor(t, 1)
	stop()
	assert.Equal(t, 0.0, value(t, first, notify.Deliveries, "ws", "prod"))
	assert.Equal(t, 0.0, value(t, first, notify.Attempts, "outcome", notify.AttemptOK))

	next := prometheus.NewRegistry()
	run(t, e.config(hook, next))
	eventually(t, next, 1, notify.Deliveries, "ws", "prod", "outcome", notify.Delivered)
	e.settled()
	got := hook.received()
	require.Len(t, got, 2)
	assert.Equal(t, string(got[0].body), string(got[1].body))
	assert.Contains(t, string(got[1].body), h.HoldID)
}

// The consumer starts with the holds appended after it was first made: a
// first start never announces the stream's history.
func TestFirstStartSkipsHistory(t *testing.T) {
	e := newEnv(t)
	old := e.hold("prod")
	hook := newHook(t, status(http.StatusOK))
	reg := prometheus.NewRegistry()
	run(t, e.config(hook, reg))
	h := e.hold("prod")
	eventually(t, reg, 1, notify.Deliveries, "ws", "prod", "outcome", notify.Delivered)
	e.settled()
	got := hook.received()
	require.Len(t, got, 1)
	assert.Contains(t, string(got[0].body), h.HoldID)
	assert.NotContains(t, string(got[0].body), old.HoldID)
}

func TestConfig(t *testing.T) {
	var c notify.Config
	c.EnsureDefaults()
	assert.Equal(t, 6, c.MaxAttempts)
	assert.Equal(t, time.Second, c.Backoff)
	assert.Equal(t, time.Minute, c.MaxBackoff)
	assert.Equal(t, 10*time.Second, c.Timeout)
	assert.Equal(t, 8, c.MaxInFlight)
	assert.NotNil(t, c.Client)
	assert.EqualError(t, c.Validate(), "notify: JetStream and Webhook are required")

	long := notify.Config{Backoff: 2 * time.Minute}
	long.EnsureDefaults()
	assert.Equal(t, 2*time.Minute, long.MaxBackoff, "MaxBackoff is at least Backoff")

	e := newEnv(t)
	good := func() notify.Config {
		return notify.Config{JetStream: e.nats.JetStream, Webhook: func(string) string { return "" }}
	}
	for _, tc := range []struct {
		name   string
		change func(*notify.Config)
		want   string
	}{
		{"no webhook func", func(c *notify.Config) { c.Webhook = nil }, "notify: JetStream and Webhook are required"},
		{"negative attempts", func(c *notify.Config) { c.MaxAttempts = -1 }, "notify: MaxAttempts must be at least 1"},
		{"negative backoff", func(c *notify.Config) { c.Backoff = -time.Second }, "notify: Backoff must be positive and MaxBackoff at least Backoff"},
		{"max below backoff", func(c *notify.Config) { c.Backoff, c.MaxBackoff = time.Minute, time.Second }, "notify: Backoff must be positive and MaxBackoff at least Backoff"},
		{"negative timeout", func(c *notify.Config) { c.Timeout = -1 }, "notify: Timeout must be positive"},
		{"too many in flight", func(c *notify.Config) { c.MaxInFlight = notify.MaxAckPending + 1 }, "notify: MaxInFlight must be from 1 to 256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.change(&c)
			n, err := notify.New(c)
			assert.Nil(t, n)
			assert.EqualError(t, err, tc.want)
		})
	}

	reg := prometheus.NewRegistry()
	c = good()
	c.Registerer = reg
	_, err := notify.New(c)
	require.NoError(t, err)
	_, err = notify.New(c)
	assert.ErrorContains(t, err, "notify: register metrics", "two notifiers cannot share a registry")
	fams, err := reg.Gather()
	require.NoError(t, err)
	var names []string
	for _, f := range fams {
		names = append(names, f.GetName())
	}
	assert.Contains(t, names, notify.Attempts, "the attempts are there at 0 before any delivery")
}

// A held event without its op's summary (the gate writes none such) is
// acked and not announced; the next is.
func TestMalformedHeldIsSkipped(t *testing.T) {
	e := newEnv(t)
	hook := newHook(t, status(http.StatusOK))
	reg := prometheus.NewRegistry()
	run(t, e.config(hook, reg))
	op := "op_" + strings.Repeat("0", 32)
	bad := &events.Held{OpHeader: events.OpHeader{OpID: op, Workspace: "prod"}, HoldID: events.HoldID(op),
		ArgsDigest: "sha256:" + strings.Repeat("0", 64), ExpiresAt: time.Now().Add(time.Hour), Reason: "no summary"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := e.w.Start(oplog.Op{Workspace: "prod", ID: op, Tool: "exec"}, 0, events.TypeHeld, "test", bad).Wait(ctx, e.ops)
	require.NoError(t, err)
	good := e.hold("prod")
	eventually(t, reg, 1, notify.Deliveries, "ws", "prod", "outcome", notify.Delivered)
	e.settled()
	got := hook.received()
	require.Len(t, got, 1)
	assert.Contains(t, string(got[0].body), good.HoldID)
	assert.Equal(t, 1.0, value(t, reg, notify.Attempts, "outcome", notify.AttemptOK))
}

// A consumer deleted under a running notifier is made again, and the
// holds appended after that are announced.
func TestDeletedConsumerIsMadeAgain(t *testing.T) {
	e := newEnv(t)
	hook := newHook(t, status(http.StatusOK))
	reg := prometheus.NewRegistry()
	run(t, e.config(hook, reg))
	ctx := context.Background()
	require.NoError(t, e.nats.JetStream.DeleteConsumer(ctx, streams.Ops, notify.Consumer))
	require.Eventually(t, func() bool {
		_, err := e.nats.JetStream.Consumer(ctx, streams.Ops, notify.Consumer)
		return err == nil
	}, 10*time.Second, 5*time.Millisecond, "the consumer is made again")
	h := e.hold("prod")
	eventually(t, reg, 1, notify.Deliveries, "ws", "prod", "outcome", notify.Delivered)
	assert.Contains(t, string(hook.waitFor(t, 1)[0].body), h.HoldID)
}
