package remote_test

import (
	"context"
	"testing"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Recovery follows the status of the lost attempt: done settles, never
// reruns, anything else is ambiguous with what is known.
func TestRecover(t *testing.T) {
	cases := []struct {
		name   string
		status nats.MsgHandler // nil: no status responder
		action executor.Action // 0: an error, asking again later
		result string
		known  []string
	}{
		{name: "done", status: answer(`{"v":1,"state":"done","result":{"n":2}}`), action: executor.Done, result: `{"n":2}`},
		{name: "done, null result", status: answer(`{"v":1,"state":"done","result":null}`), action: executor.Done, result: `null`},
		{name: "done, ambiguous", status: answer(`{"v":1,"state":"done","error":{"code":"EXECUTION_AMBIGUOUS","message":"cloud API timed out"}}`),
			action: executor.Ambiguous, known: []string{"tools.t", "a message of 19 bytes, not kept"}},
		// The rerun gets the recorded error from the idempotent server.
		{name: "done, failed", status: answer(`{"v":1,"state":"done","error":{"code":"QUOTA_EXCEEDED"}}`), action: executor.Rerun},
		{name: "never", status: answer(`{"v":1,"state":"never"}`), action: executor.Rerun},
		{name: "running", status: answer(`{"v":1,"state":"running"}`)}, // still being worked on: ask later
		{name: "unknown", status: answer(`{"v":1,"state":"unknown"}`),
			action: executor.Ambiguous, known: []string{"attempt L0ST", "status: unknown"}},
		{name: "no server"},                 // restarting, perhaps: ask later
		{name: "no answer", status: silent}, // likewise
		{name: "not understood", status: answer(`{"v":2,"state":"done","result":1}`),
			action: executor.Ambiguous, known: []string{"protocol version 2, want 1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t)
			queries := make(chan *nats.Msg, 1)
			if tc.status != nil {
				g.on(t, status, func(m *nats.Msg) {
					queries <- m
					tc.status(m)
				})
			}
			c := call()
			c.Attempt = "NEW"
			rec, err := g.remote(t).Recover(context.Background(), c, executor.Lost{Attempt: "L0ST", Own: true})
			if tc.action == 0 {
				require.Error(t, err, "the claim stands and recovery asks again later")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.action, rec.Action)
			if tc.result != "" {
				assert.JSONEq(t, tc.result, string(rec.Result))
			}
			for _, s := range tc.known {
				assert.Contains(t, rec.Known, s)
			}
			if tc.status != nil {
				// The query names the lost attempt, not the new one.
				assert.JSONEq(t, `{"v":1,"op_id":"`+opID+`","attempt":"L0ST"}`, string((<-queries).Data))
			}
		})
	}
}

// A recovery cut short by shutdown decides nothing.
func TestRecoverCancelled(t *testing.T) {
	g := newRig(t)
	g.on(t, status, answer(`{"v":1,"state":"running"}`))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := g.remote(t).Recover(ctx, call(), executor.Lost{Attempt: "L0ST", Own: true})
	assert.ErrorIs(t, err, context.Canceled)
}
