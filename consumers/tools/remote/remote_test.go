package remote_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/consumers/tools/remote"
	"github.com/airlock-dev/airlock/events"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every way a call can end gives the result or the code the protocol
// names, with a message that says what happened.
func TestExecute(t *testing.T) {
	cases := []struct {
		name   string
		call   nats.MsgHandler // nil: nothing listens on the subject
		status nats.MsgHandler // nil: nothing listens on the status subject
		result string          // the result, or
		code   events.Code     // the error's code,
		msg    []string        // and what its message says
	}{
		{name: "result", call: answer(`{"v":1,"result":{"ok":true}}`), result: `{"ok":true}`},
		{name: "null result", call: answer(`{"v":1,"result":null,"extra":"ignored"}`), result: `null`},
		{name: "server error", call: answer(`{"v":1,"error":{"code":"QUOTA_EXCEEDED","message":"try tomorrow"}}`),
			code: events.CodeExecutorFailed, msg: []string{"tools.t", "QUOTA_EXCEEDED", "a message of 12 bytes, not kept"}},
		{name: "server says bad args", call: answer(`{"v":1,"error":{"code":"INVALID_ARGS","message":"x must be a string"}}`),
			code: events.CodeInvalidArgs, msg: []string{"a message of 18 bytes"}},
		{name: "server says ambiguous", call: answer(`{"v":1,"error":{"code":"EXECUTION_AMBIGUOUS","message":"cloud API timed out"}}`),
			code: events.CodeAmbiguous, msg: []string{"tools.t", "a message of 19 bytes"}},
		{name: "no responders", code: events.CodeRemoteUnavailable, msg: []string{"no tool server listens on tools.t", "nothing received"}},

		{name: "timeout, status done", call: silent, status: answer(`{"v":1,"state":"done","result":{"n":7}}`), result: `{"n":7}`},
		{name: "timeout, status done with an error", call: silent, status: answer(`{"v":1,"state":"done","error":{"code":"DENIED_UPSTREAM"}}`),
			code: events.CodeExecutorFailed, msg: []string{"DENIED_UPSTREAM"}},
		{name: "timeout, status never", call: silent, status: answer(`{"v":1,"state":"never"}`),
			code: events.CodeRemoteUnavailable, msg: []string{"no answer in 300ms", "status: never"}},
		{name: "timeout, status running", call: silent, status: answer(`{"v":1,"state":"running"}`),
			code: events.CodeAmbiguous, msg: []string{"remote call to tools.t sent at ", "no answer in 300ms", "status: running"}},
		{name: "timeout, status unknown", call: silent, status: answer(`{"v":1,"state":"unknown"}`),
			code: events.CodeAmbiguous, msg: []string{"no answer in 300ms", "status: unknown"}},
		{name: "timeout, no status responder", call: silent,
			code: events.CodeAmbiguous, msg: []string{"no answer in 300ms", "no status responder on tools.t.status"}},
		{name: "timeout, status silent", call: silent, status: silent,
			code: events.CodeAmbiguous, msg: []string{"no answer on tools.t.status in 300ms"}},
		{name: "timeout, status not understood", call: silent, status: answer(`{"v":1,"state":"maybe"}`),
			code: events.CodeAmbiguous, msg: []string{"unknown state (5 bytes)"}},
		{name: "timeout, status query refused", call: silent, status: answer(`{"v":1,"error":{"code":"INVALID_REQUEST","message":"no"}}`),
			code: events.CodeAmbiguous, msg: []string{"refused the query: INVALID_REQUEST, a message of 2 bytes"}},

		// A reply proves the server got the call, so one Airlock cannot
		// read does not prove nothing happened: the status decides.
		{name: "reply not JSON", call: answer(`OK!`),
			code: events.CodeAmbiguous, msg: []string{"not protocol v1", "not a JSON object", "no status responder"}},
		{name: "reply of another version", call: answer(`{"v":2,"result":{}}`),
			code: events.CodeAmbiguous, msg: []string{"protocol version 2, want 1"}},
		{name: "reply without version", call: answer(`{"result":{}}`),
			code: events.CodeAmbiguous, msg: []string{`no protocol version "v"`}},
		{name: "reply with result and error", call: answer(`{"v":1,"result":1,"error":{"code":"X"}}`),
			code: events.CodeAmbiguous, msg: []string{`both "result" and "error"`}},
		{name: "reply with neither", call: answer(`{"v":1}`),
			code: events.CodeAmbiguous, msg: []string{`neither "result" nor "error"`}},
		{name: "reply not JSON, status done", call: answer(`OK!`), status: answer(`{"v":1,"state":"done","result":"fine"}`), result: `"fine"`},
		{name: "reply not JSON, status never", call: answer(`OK!`), status: answer(`{"v":1,"state":"never"}`),
			code: events.CodeRemoteUnavailable, msg: []string{"not protocol v1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t)
			if tc.call != nil {
				g.on(t, subject, tc.call)
			}
			if tc.status != nil {
				g.on(t, status, tc.status)
			}
			res, err := g.remote(t).Execute(context.Background(), call())
			if tc.code == "" {
				require.NoError(t, err)
				assert.JSONEq(t, tc.result, string(res))
				return
			}
			assert.Nil(t, res)
			var e *events.Error
			require.True(t, errors.As(err, &e), "want an *events.Error, got %v", err)
			assert.Equal(t, tc.code, e.Code, e.Message)
			for _, s := range tc.msg {
				assert.Contains(t, e.Message, s)
			}
			// The message goes into the op's events: nothing the server
			// said but its code is kept.
			for _, said := range []string{"try tomorrow", "x must be a string", "cloud API timed out", "maybe", "OK!"} {
				assert.NotContains(t, e.Message, said)
			}
		})
	}
}

// The call carries the op in its body and headers; the status query
// carries the op and the attempt it asks about.
func TestExecuteSends(t *testing.T) {
	g := newRig(t)
	calls := make(chan *nats.Msg, 1)
	g.on(t, subject, func(m *nats.Msg) { calls <- m })
	queries := make(chan *nats.Msg, 1)
	g.on(t, status, func(m *nats.Msg) {
		queries <- m
		_ = m.Respond([]byte(`{"v":1,"state":"done","result":1}`))
	})
	res, err := g.remote(t).Execute(context.Background(), call())
	require.NoError(t, err)
	assert.Equal(t, "1", string(res))

	m := <-calls
	assert.Equal(t, opID, m.Header.Get(remote.HeaderOpID))
	assert.Equal(t, "A1", m.Header.Get(remote.HeaderAttempt))
	assert.JSONEq(t, `{"v":1,"op_id":"`+opID+`","attempt":"A1","workspace":"w","agent":"a","tool":"t","args":{"x":1}}`, string(m.Data))
	q := <-queries
	assert.JSONEq(t, `{"v":1,"op_id":"`+opID+`","attempt":"A1"}`, string(q.Data))
	assert.Equal(t, opID, q.Header.Get(remote.HeaderOpID))
}

// Shutting down mid-call is not an outcome: Execute returns ctx's error at
// once, asks no status, and the claim stands for recovery.
func TestExecuteCancelled(t *testing.T) {
	g := newRig(t)
	got := make(chan struct{})
	g.on(t, subject, func(*nats.Msg) { close(got) })
	var queries atomic.Int32
	g.on(t, status, counted(&queries, answer(`{"v":1,"state":"never"}`)))
	r, err := remote.New(remote.Config{Conn: g.n.Conn, Tool: "t", Subject: subject, Timeout: time.Minute})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-got
		cancel()
	}()
	start := time.Now()
	_, err = r.Execute(ctx, call())
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, events.CodeInternal, events.CodeOf(err), "not an *events.Error: the op stays claimed")
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.Zero(t, queries.Load())
}

// A connection that is closed sends nothing: REMOTE_UNAVAILABLE.
func TestExecuteClosedConn(t *testing.T) {
	g := newRig(t)
	var calls atomic.Int32
	g.on(t, subject, counted(&calls, answer(`{"v":1,"result":1}`)))
	nc, err := nats.Connect(g.n.Server.ClientURL())
	require.NoError(t, err)
	r, err := remote.New(remote.Config{Conn: nc, Subject: subject})
	require.NoError(t, err)
	nc.Close()
	_, err = r.Execute(context.Background(), call())
	assert.Equal(t, events.CodeRemoteUnavailable, events.CodeOf(err), "%v", err)
	assert.ErrorContains(t, err, "not sent")
	assert.Zero(t, calls.Load())
}

func TestConfig(t *testing.T) {
	g := newRig(t)
	r, err := remote.New(remote.Config{Conn: g.n.Conn, Subject: "tools.deploy"})
	require.NoError(t, err)
	assert.Equal(t, "remote", r.Tool())
	assert.Equal(t, events.ClassNetwork, r.Class())
	assert.Equal(t, "tools.deploy", r.Subject())
	assert.Equal(t, "tools.deploy.status", r.StatusSubject())

	r, err = remote.New(remote.Config{Conn: g.n.Conn, Tool: "deploy", Subject: "tools.deploy", Class: events.ClassDestructive})
	require.NoError(t, err)
	assert.Equal(t, "deploy", r.Tool())
	assert.Equal(t, events.ClassDestructive, r.Class())

	bad := []struct {
		name string
		cfg  remote.Config
	}{
		{"no conn", remote.Config{Subject: "tools.x"}},
		{"no subject", remote.Config{Conn: g.n.Conn}},
		{"wildcard", remote.Config{Conn: g.n.Conn, Subject: "tools.*"}},
		{"full wildcard", remote.Config{Conn: g.n.Conn, Subject: "tools.>"}},
		{"empty token", remote.Config{Conn: g.n.Conn, Subject: "tools..x"}},
		{"space", remote.Config{Conn: g.n.Conn, Subject: "tools x"}},
		{"airlock's", remote.Config{Conn: g.n.Conn, Subject: "airlock.v1.q.op"}},
		{"inbox", remote.Config{Conn: g.n.Conn, Subject: "_INBOX.x"}},
		{"system", remote.Config{Conn: g.n.Conn, Subject: "$JS.API.INFO"}},
		{"bad tool", remote.Config{Conn: g.n.Conn, Subject: "tools.x", Tool: "Deploy"}},
		{"bad class", remote.Config{Conn: g.n.Conn, Subject: "tools.x", Class: "cosmic"}},
		{"timeout too long", remote.Config{Conn: g.n.Conn, Subject: "tools.x", Timeout: time.Hour}},
		{"negative timeout", remote.Config{Conn: g.n.Conn, Subject: "tools.x", Timeout: -time.Second}},
		{"status timeout too long", remote.Config{Conn: g.n.Conn, Subject: "tools.x", StatusTimeout: time.Hour}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := remote.New(tc.cfg)
			assert.Error(t, err)
		})
	}
}

// Args that are not JSON never leave Airlock.
func TestExecuteBadArgs(t *testing.T) {
	g := newRig(t)
	var calls atomic.Int32
	g.on(t, subject, counted(&calls, answer(`{"v":1,"result":1}`)))
	c := call()
	c.Args = json.RawMessage(`{nope`)
	_, err := g.remote(t).Execute(context.Background(), c)
	assert.Equal(t, events.CodeInvalidArgs, events.CodeOf(err), "%v", err)
	assert.Zero(t, calls.Load())
}
