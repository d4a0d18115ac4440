package authority_test

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/watch"
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
		events.LiveSubject(events.OpEventSubject("ws", opID, "echo", events.TypeDecided)),
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
				// answer goes nowhere; on a live subject, to the watchers
				// only (TestReplyOnLiveSubjectIsNotRepublished), never into
				// the service account.
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

// An answer a client aims, by its reply subject, at a live subject stays
// in the clients account, where the watchers of AIRLOCK_OPS receive it
// beside what the stream republishes. It is never stored, and never
// passes for a republished message: a responder's own answer has no
// stream headers; a direct get's copy of a stored event has the stream's
// but not Nats-Last-Sequence; a batch direct get's has both, and
// Nats-Num-Pending, which a republished message never has; its end of
// batch names no stream. watch.Republished refuses every one, so airlock
// watch shows them as undecodable, never as events.
func TestReplyOnLiveSubjectIsNotRepublished(t *testing.T) {
	e := start(t, nil)
	au := e.connect(t, "auditor")
	live, err := au.nc.SubscribeSync(events.LiveSubjects)
	require.NoError(t, err)
	require.NoError(t, au.nc.Flush())

	// What the stream stored, as the watcher receives it: republished,
	// and taken for that.
	e.appendDecided(t, "ws", opID)
	opSubject := events.OpEventSubject("ws", opID, "echo", events.TypeDecided)
	target := events.LiveSubject(opSubject)
	m, err := live.NextMsg(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, target, m.Subject)
	seq, subject, _, ok := watch.Republished(m.Header)
	require.True(t, ok, "the republished event: %v", m.Header)
	assert.Equal(t, uint64(1), seq)
	assert.Equal(t, opSubject, subject)
	assert.Equal(t, "decided", watch.Decode(m.Subject, m.Header, m.Data, time.Now()).Kind)

	e.respond(t, events.QueryOpSubject, `{"state":"denied"}`)
	ag := e.connect(t, "agent")
	ag.subRefused(t, events.LiveSubjects)
	before := ag.count()
	directGet := "$JS.API.DIRECT.GET." + streams.Ops
	for _, call := range []struct{ subject, body string }{
		{events.QueryOpSubject, `{}`},                     // the query service's answer
		{"$JS.API.STREAM.INFO." + streams.Ops, ""},        // the JetStream API's
		{directGet, `{"seq":1}`},                          // a single direct get
		{directGet + "." + opSubject, ""},                 // the last message of a subject
		{directGet, `{"seq":1,"batch":2}`},                // a batch: the message, then the end of batch
		{directGet, `{"multi_last":["airlock.v1.op.>"]}`}, // the last of each subject, then the end of batch
	} {
		require.NoError(t, ag.nc.PublishRequest(call.subject, target, []byte(call.body)))
	}
	require.NoError(t, ag.nc.Flush())

	// Every answer, in whichever order they come, by what it is.
	got := map[string][]*nats.Msg{}
	for range 8 {
		m, err := live.NextMsg(5 * time.Second)
		require.NoError(t, err)
		assert.Equal(t, target, m.Subject)
		_, _, _, ok := watch.Republished(m.Header)
		assert.False(t, ok, "taken for republished: %v %s", m.Header, m.Data)
		ev := watch.Decode(m.Subject, m.Header, m.Data, time.Now())
		assert.Equal(t, watch.Undecodable, ev.Kind)
		assert.Contains(t, ev.Error, "not a message AIRLOCK_OPS stored")
		assert.Zero(t, ev.Seq)
		h := m.Header
		var kind string
		switch {
		case h.Get("Status") == "204":
			kind = "end of batch"
		case h.Get(jetstream.StreamHeader) == "":
			kind = "answer"
		case h.Get("Nats-Num-Pending") != "":
			kind = "batch copy"
		default:
			kind = "copy"
		}
		got[kind] = append(got[kind], m)
	}
	require.Len(t, got["answer"], 2, "the query service's and the stream info")
	require.Len(t, got["copy"], 2, "the direct gets by sequence and by subject")
	require.Len(t, got["batch copy"], 2, "the batch's and the multi-last's")
	require.Len(t, got["end of batch"], 2)
	var bodies []string
	for _, m := range got["answer"] {
		assert.Empty(t, m.Header.Get(events.HeaderPrefix+"specversion"))
		bodies = append(bodies, string(m.Data))
	}
	assert.Contains(t, bodies, `{"state":"denied"}`)
	for _, m := range append(got["copy"], got["batch copy"]...) {
		// The stored event, with the stream's headers: only what marks
		// a republished message tells them apart.
		assert.Equal(t, streams.Ops, m.Header.Get(jetstream.StreamHeader))
		assert.Equal(t, opSubject, m.Header.Get(jetstream.SubjectHeader))
		assert.Equal(t, "1", m.Header.Get(jetstream.SequenceHeader))
		assert.NotEmpty(t, m.Header.Get("Nats-Time-Stamp"))
		assert.Equal(t, string(events.TypeDecided), m.Header.Get(events.HeaderPrefix+"type"))
	}
	for _, m := range got["copy"] {
		assert.Empty(t, m.Header.Get("Nats-Last-Sequence"))
	}
	for _, m := range got["batch copy"] {
		assert.Equal(t, "0", m.Header.Get("Nats-Last-Sequence"), "as a first republished message says")
		assert.Equal(t, "0", m.Header.Get("Nats-Num-Pending"))
	}
	for _, m := range got["end of batch"] {
		assert.NotEmpty(t, m.Header.Get("Nats-Num-Pending"))
		assert.Equal(t, "1", m.Header.Get("Nats-Last-Sequence"))
	}
	_, err = live.NextMsg(100 * time.Millisecond)
	assert.ErrorIs(t, err, nats.ErrTimeout)
	assert.Equal(t, before, ag.count(), "every call was allowed")
	assert.Equal(t, uint64(1), e.msgs(t, streams.Ops), "nothing stored")
	assert.Zero(t, e.msgs(t, streams.Requests))
}
