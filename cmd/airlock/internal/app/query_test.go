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
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// queryAfter is a projector over a new store for n's ops stream, not
// running, and the query service over that store, whose fresh misses
// wait for it.
func queryAfter(t *testing.T, n *testenv.NATS) (*projector.Projector, micro.Service) {
	t.Helper()
	st, err := store.Open(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	p, err := projector.New(projector.Config{JetStream: n.JetStream, Store: st})
	require.NoError(t, err)
	svc, err := projector.Serve(n.Conn, st, nil, nil, p.CaughtUp)
	require.NoError(t, err)
	t.Cleanup(func() { _ = svc.Stop() })
	return p, svc
}

// askOp asks the query service about op, fresh or not, and sends the
// answer on the channel it returns (an answer whose code is UNANSWERED
// when none came).
func askOp(t *testing.T, nc *nats.Conn, op string, fresh bool) <-chan *nats.Msg {
	t.Helper()
	ch := make(chan *nats.Msg, 1)
	go func() {
		m, err := nc.Request(events.QueryOpSubject, fmt.Appendf(nil, `{"op_id":%q,"fresh":%t}`, op, fresh), 10*time.Second)
		if err != nil {
			m = &nats.Msg{Header: nats.Header{micro.ErrorCodeHeader: []string{"UNANSWERED"}}, Data: []byte(err.Error())}
		}
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

	p, _ := queryAfter(t, n)
	// A question that is not fresh is answered at once, as the
	// projection has it.
	select {
	case m := <-askOp(t, n.Conn, op, false):
		assert.Equal(t, string(events.CodeNotFound), m.Header.Get(micro.ErrorCodeHeader), "%s", m.Data)
	case <-time.After(time.Second):
		t.Fatal("a question that is not fresh waited")
	}
	answer := askOp(t, n.Conn, op, true)
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
		require.Empty(t, m.Header.Get(micro.ErrorCodeHeader), "%s", m.Data)
		var got events.Op
		require.NoError(t, json.Unmarshal(m.Data, &got))
		assert.Equal(t, op, got.ID)
	case <-time.After(projector.CaughtUpWait + 3*time.Second):
		t.Fatal("no answer")
	}
}

// Answers waiting for the projection are bounded: past
// projector.MaxCaughtUpWaits a miss is answered at once; each waiting one
// is answered, NOT_FOUND, once projector.CaughtUpWait has passed, or
// when the service stops, which waits for them.
func TestOpQueryWaitsAreBounded(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	fill(t, n, 2)
	_, svc := queryAfter(t, n) // its projector never runs
	ask := func(i int) []<-chan *nats.Msg {
		waiting := make([]<-chan *nats.Msg, projector.MaxCaughtUpWaits)
		for j := range waiting {
			waiting[j] = askOp(t, n.Conn, fmt.Sprintf("op_%032x", i+j), true)
		}
		return waiting
	}
	began := time.Now()
	waiting := ask(0)
	time.Sleep(200 * time.Millisecond)
	select {
	case m := <-askOp(t, n.Conn, fmt.Sprintf("op_%032x", 1<<20), true):
		assert.Equal(t, string(events.CodeNotFound), m.Header.Get(micro.ErrorCodeHeader), "%s", m.Data)
		assert.Less(t, time.Since(began), projector.CaughtUpWait, "a question past the bound waits for nothing")
	case <-time.After(projector.CaughtUpWait):
		t.Fatal("a question past the bound waited")
	}
	for _, w := range waiting {
		select {
		case m := <-w:
			assert.Equal(t, string(events.CodeNotFound), m.Header.Get(micro.ErrorCodeHeader), "%s", m.Data)
			assert.GreaterOrEqual(t, time.Since(began), projector.CaughtUpWait)
		case <-time.After(projector.CaughtUpWait + 5*time.Second):
			t.Fatal("a waiting question was never answered")
		}
	}

	// Stopping the service ends the waits, and returns once they are
	// answered: the store can be closed after it.
	waiting = ask(1 << 10)
	time.Sleep(200 * time.Millisecond)
	stopped := time.Now()
	require.NoError(t, svc.Stop())
	assert.Less(t, time.Since(stopped), projector.CaughtUpWait/2, "a stop ends the waits")
	for _, w := range waiting {
		select {
		case m := <-w:
			assert.Equal(t, string(events.CodeNotFound), m.Header.Get(micro.ErrorCodeHeader), "%s", m.Data)
			assert.Less(t, time.Since(stopped), projector.CaughtUpWait/2)
		case <-time.After(projector.CaughtUpWait):
			t.Fatal("a waiting question was not answered when the service stopped")
		}
	}
}
