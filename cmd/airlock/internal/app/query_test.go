package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/consumers/projector"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// queryAfter is a projector over a new store for n's ops stream, not
// running, and the query service over that store, whose misses wait for
// it.
func queryAfter(t *testing.T, n *testenv.NATS) *projector.Projector {
	t.Helper()
	st, err := store.Open(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	p, err := projector.New(projector.Config{JetStream: n.JetStream, Store: st})
	require.NoError(t, err)
	svc, err := projector.Serve(n.Conn, st, nil, nil, p.CaughtUp)
	require.NoError(t, err)
	t.Cleanup(func() { _ = svc.Stop() })
	return p
}

// askOp asks the query service about op and sends the answer on the
// channel it returns.
func askOp(t *testing.T, nc *nats.Conn, op string) <-chan *nats.Msg {
	t.Helper()
	ch := make(chan *nats.Msg, 1)
	go func() {
		m, err := nc.Request(events.QueryOpSubject, fmt.Appendf(nil, `{"op_id":%q}`, op), 10*time.Second)
		assert.NoError(t, err)
		ch <- m
	}()
	return ch
}

// A question about an op the projection does not hold yet is answered
// once it does: the op stored before the question is found.
func TestOpQueryWaitsForTheProjection(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	fill(t, n, 12)
	st, err := n.JetStream.Stream(context.Background(), streams.Ops)
	require.NoError(t, err)
	last, err := st.GetLastMsgForSubject(context.Background(), events.OpSubjects)
	require.NoError(t, err)
	_, op, _, _, ok := events.OpSubjectParts(last.Subject)
	require.True(t, ok, last.Subject)

	p := queryAfter(t, n)
	answer := askOp(t, n.Conn, op)
	select {
	case m := <-answer:
		t.Fatalf("answered before the projection held the op: %s %s", m.Header, m.Data)
	case <-time.After(300 * time.Millisecond):
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	select {
	case m := <-answer:
		require.Empty(t, m.Header.Get("Nats-Service-Error-Code"), "%s", m.Data)
		var got events.Op
		require.NoError(t, json.Unmarshal(m.Data, &got))
		assert.Equal(t, op, got.ID)
	case <-time.After(projector.CaughtUpWait + 3*time.Second):
		t.Fatal("no answer")
	}
}

// Answers waiting for the projection are bounded: past
// projector.MaxCaughtUpWaits a miss is answered at once; each waiting one
// is answered, NOT_FOUND, once projector.CaughtUpWait has passed.
func TestOpQueryWaitsAreBounded(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	fill(t, n, 2)
	queryAfter(t, n) // its projector never runs
	began := time.Now()
	waiting := make([]<-chan *nats.Msg, projector.MaxCaughtUpWaits)
	for i := range waiting {
		waiting[i] = askOp(t, n.Conn, fmt.Sprintf("op_%032x", i))
	}
	time.Sleep(200 * time.Millisecond)
	select {
	case m := <-askOp(t, n.Conn, fmt.Sprintf("op_%032x", 1<<20)):
		assert.Equal(t, string(events.CodeNotFound), m.Header.Get("Nats-Service-Error-Code"), "%s", m.Data)
		assert.Less(t, time.Since(began), projector.CaughtUpWait, "a question past the bound waits for nothing")
	case <-time.After(projector.CaughtUpWait):
		t.Fatal("a question past the bound waited")
	}
	for _, w := range waiting {
		select {
		case m := <-w:
			assert.Equal(t, string(events.CodeNotFound), m.Header.Get("Nats-Service-Error-Code"), "%s", m.Data)
			assert.GreaterOrEqual(t, time.Since(began), projector.CaughtUpWait)
		case <-time.After(projector.CaughtUpWait + 5*time.Second):
			t.Fatal("a waiting question was never answered")
		}
	}
}
