package authority_test

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// NATS does not check the reply subject a client names. With every
// principal in the streams' account, a client could make a responder (the
// JetStream API, a PubAck, a micro service's discovery handlers, Airlock's
// own command and query answers) publish its answer onto a stream subject,
// where it was stored. In the clients account, every answer goes back to
// the clients account, where no stream is, and an answer aimed at another
// imported subject is dropped, not sent into the service account.
func TestReplyOnStreamSubjectStoresNothing(t *testing.T) {
	e := start(t, map[string]authority.Role{"approver2": authority.RoleApprover})
	ctx := context.Background()
	op := e.appendDecided(t, "ws", opID)
	opSubject := events.OpEventSubject("ws", opID, "echo", events.TypeDecided)
	ack, err := e.js.Publish(ctx, events.RequestSubject("ws", "agent"), []byte(`{"args":1}`))
	require.NoError(t, err)
	require.Equal(t, uint64(1), ack.Sequence)

	// Every responder a client reaches: a micro service in the service
	// account (as the query service is), and Airlock's command and query
	// subjects.
	svc, err := micro.AddService(e.svc, micro.Config{Name: "airlock-test", Version: "0.0.1"})
	require.NoError(t, err)
	defer func() { _ = svc.Stop() }()
	e.respond(t, events.QueryOpSubject, `{"state":"denied"}`)
	e.respond(t, events.ResolveSubjects, `{"ok":true}`)
	e.respond(t, events.ControlSubjects, `{"ok":true}`)

	// Whatever reaches an Airlock subject other than the requests and
	// commands sent below is an answer that escaped.
	spy, err := e.svc.SubscribeSync(events.SubjectRoot + ".>")
	require.NoError(t, err)
	require.NoError(t, e.svc.Flush())

	replies := []string{
		events.OpEventSubject("ws", opID, "echo", events.TypeDecided),
		events.ModeSubject("ws"),
		events.RequestSubject("ws", "agent"),
		events.ResolveSubject("ws", "approver2"),
		events.ControlSubject("ws", "operator"),
	}
	type call struct{ subject, body string }
	reads := func(stream string) []call {
		return []call{
			{"$JS.API.STREAM.INFO." + stream, ""},
			{"$JS.API.DIRECT.GET." + stream, `{"seq":1}`},
		}
	}
	opsReads := append(reads(streams.Ops), call{"$JS.API.DIRECT.GET." + streams.Ops + "." + opSubject, ""})
	common := append([]call{{events.QueryOpSubject, `{}`}, {"$SRV.PING", ""}, {"$SRV.INFO", ""}}, opsReads...)
	both := append(append([]call(nil), common...), reads(streams.Requests)...)
	both = append(both, call{"$JS.API.DIRECT.GET." + streams.Requests + "." + events.RequestSubject("ws", "agent"), ""})
	for _, tc := range []struct {
		name      string
		principal string
		calls     []call
		sent      int // messages it sends to an Airlock subject per reply
	}{
		{"agent", "agent", append(append([]call(nil), common...), call{events.RequestSubject("ws", "agent"), `{"args":2}`}), 1},
		{"approver", "approver", append(append([]call(nil), both...), call{events.ResolveSubject("ws", "approver"), `{}`}), 1},
		{"operator", "operator", append(append([]call(nil), both...), call{events.ControlSubject("ws", "operator"), `{}`}), 1},
		{"auditor", "auditor", both, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e.connect(t, tc.principal)
			for _, call := range tc.calls {
				// The call works and is answered...
				if call.subject != events.RequestSubject("ws", "agent") {
					_, err := c.nc.Request(call.subject, []byte(call.body), 5*time.Second)
					require.NoError(t, err, call.subject)
				}
				// ...and with the reply on a stream or command subject the
				// answer goes nowhere.
				for _, reply := range replies {
					require.NoError(t, c.nc.PublishRequest(call.subject, reply, []byte(call.body)))
				}
			}
			require.NoError(t, c.nc.Flush())
			assert.Zero(t, c.count(), "no permission violations: every call was allowed")
		})
	}

	// What the clients sent themselves: the query requests and commands
	// with a normal reply, then the same with each bad reply; the agent's
	// request once per reply. Nothing else.
	want := map[string]int{
		events.QueryOpSubject:                   4 * (1 + len(replies)),
		events.RequestSubject("ws", "agent"):    len(replies),
		events.ResolveSubject("ws", "approver"): 1 + len(replies),
		events.ControlSubject("ws", "operator"): 1 + len(replies),
	}
	got := map[string]int{}
	for {
		m, err := spy.NextMsg(500 * time.Millisecond)
		if err != nil {
			require.ErrorIs(t, err, nats.ErrTimeout)
			break
		}
		got[m.Subject]++
	}
	assert.Equal(t, want, got)

	// The requests stream holds the service's request and the agent's
	// requests, all on the agent's subject with their own bodies; the ops
	// stream only the op's event.
	assert.Equal(t, uint64(1+len(replies)), e.msgs(t, streams.Requests))
	rs, err := e.js.Stream(ctx, streams.Requests)
	require.NoError(t, err)
	for seq := uint64(1); seq <= uint64(1+len(replies)); seq++ {
		raw, err := rs.GetMsg(ctx, seq)
		require.NoError(t, err)
		assert.Equal(t, events.RequestSubject("ws", "agent"), raw.Subject)
		assert.Contains(t, []string{`{"args":1}`, `{"args":2}`}, string(raw.Data))
	}
	assert.Equal(t, uint64(1), e.msgs(t, streams.Ops))
	os, err := e.js.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	raw, err := os.GetLastMsgForSubject(ctx, events.OpFilter(op.Workspace, op.ID))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), raw.Sequence)
	_, err = os.GetLastMsgForSubject(ctx, events.ModeSubject("ws"))
	assert.ErrorIs(t, err, jetstream.ErrMsgNotFound)
}

// An answer a client aims, by its reply subject, at an op subject stays in
// the clients account, where a watcher of the op events receives it. It
// is never stored, and never looks like a live event: a responder's own
// answer has no CloudEvents headers, and a direct get's copy of a stored
// event carries the stream's headers, which an appended event never has.
// airlock watch shows both as undecodable.
func TestReplyOnOpSubjectReachesWatchersOnly(t *testing.T) {
	e := start(t, nil)
	e.appendDecided(t, "ws", opID)
	e.respond(t, events.QueryOpSubject, `{"state":"denied"}`)
	au := e.connect(t, "auditor")
	watch, err := au.nc.SubscribeSync(events.OpSubjects)
	require.NoError(t, err)
	require.NoError(t, au.nc.Flush())

	ag := e.connect(t, "agent")
	forged := events.OpEventSubject("ws", opID, "echo", events.TypeCompleted)
	require.NoError(t, ag.nc.PublishRequest(events.QueryOpSubject, forged, []byte(`{}`)))
	require.NoError(t, ag.nc.PublishRequest("$JS.API.DIRECT.GET."+streams.Ops, forged, []byte(`{"seq":1}`)))
	require.NoError(t, ag.nc.Flush())
	assert.Zero(t, ag.count())

	// The two answers, in whichever order they come.
	got := map[string]*nats.Msg{}
	for range 2 {
		m, err := watch.NextMsg(5 * time.Second)
		require.NoError(t, err)
		assert.Equal(t, forged, m.Subject)
		got[m.Header.Get(jetstream.StreamHeader)] = m
	}
	answer, stored := got[""], got[streams.Ops]
	require.NotNil(t, answer, "the query service's answer")
	require.NotNil(t, stored, "the direct get's copy, which says it is stored")
	assert.Equal(t, `{"state":"denied"}`, string(answer.Data))
	assert.Empty(t, answer.Header.Get(events.HeaderPrefix+"specversion"))
	assert.Equal(t, string(events.TypeDecided), stored.Header.Get(events.HeaderPrefix+"type"))
	_, err = watch.NextMsg(100 * time.Millisecond)
	assert.ErrorIs(t, err, nats.ErrTimeout)
	assert.Equal(t, uint64(1), e.msgs(t, streams.Ops), "nothing stored")
}
