package authority_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/airlock-dev/airlock/producers"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// appendDecided appends a decided event of a new op with the service's
// connection and returns the op.
func (e *env) appendDecided(t *testing.T, ws, id string) oplog.Op {
	t.Helper()
	ctx := context.Background()
	st, err := e.js.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	op := oplog.Op{Workspace: ws, ID: id, Tool: "echo"}
	_, err = testenv.Writer(t, e.js).Append(ctx, st, op, 0, events.TypeDecided, "test",
		&events.Decided{OpHeader: events.OpHeader{OpID: id, Workspace: ws}, Request: &events.Summary{Tool: "echo"}, PolicyHash: "p"})
	require.NoError(t, err)
	return op
}

// respond answers every request on subject, in the service account, with
// answer, and returns the subjects of the first 64 requests as they
// arrive.
func (e *env) respond(t *testing.T, subject, answer string) <-chan string {
	t.Helper()
	got := make(chan string, 64)
	sub, err := e.svc.Subscribe(subject, func(m *nats.Msg) {
		select {
		case got <- m.Subject:
		default:
		}
		_ = m.Respond([]byte(answer))
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, e.svc.Flush())
	return got
}

const opID = "op_0123456789abcdef0123456789abcdef"

func TestEveryPrincipalConnectsAndNoOneElse(t *testing.T) {
	e := start(t, map[string]authority.Role{"approver2": authority.RoleApprover})
	for _, p := range e.set.Principals() {
		t.Run(p.Name, func(t *testing.T) {
			c := e.connect(t, p.Name)
			assert.True(t, c.nc.IsConnected())
			assert.Equal(t, p.Role.Account(), e.account(t, c))
			// Every principal reads the ops stream, through the imports
			// unless it is the service.
			_, err := c.js.Stream(context.Background(), streams.Ops)
			require.NoError(t, err)
			if p.Role != authority.RoleAgent {
				_, err := c.js.Stream(context.Background(), streams.Requests)
				require.NoError(t, err)
			}
			assert.Zero(t, c.count())
		})
	}

	_, err := nats.Connect(e.srv.ClientURL())
	assert.ErrorIs(t, err, nats.ErrAuthorization, "no credentials")
	// A well-formed key the server does not know.
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	_, err = nats.Connect(e.srv.ClientURL(), nats.Nkey(pub, kp.Sign))
	assert.ErrorIs(t, err, nats.ErrAuthorization, "unknown key")

	// Someone else's public key without its seed.
	agent, _ := e.set.Lookup("agent")
	_, err = nats.Connect(e.srv.ClientURL(), nats.Nkey(agent.PublicKey, kp.Sign))
	assert.ErrorIs(t, err, nats.ErrAuthorization, "wrong signature")

	// JetStream runs in the service account only.
	for name, want := range map[string]bool{authority.ServiceAccount: true, authority.ClientAccount: false} {
		acc, err := e.srv.LookupAccount(name)
		require.NoError(t, err)
		assert.Equal(t, want, acc.JetStreamEnabled(), name)
	}
}

func TestAgentSubmitsAndReadsButWritesNothingElse(t *testing.T) {
	e := start(t, nil)
	ctx := context.Background()
	ag := e.connect(t, "agent")
	op := e.appendDecided(t, "ws", opID)

	// Submit: a JetStream publish to the requests stream in the service
	// account, acknowledged through the import.
	msg := nats.NewMsg(events.RequestSubject("ws", "agent"))
	msg.Data = []byte(`{}`)
	ack, err := ag.js.PublishMsg(ctx, msg, jetstream.WithMsgID("fp-1"))
	require.NoError(t, err)
	assert.Equal(t, streams.Requests, ack.Stream)
	assert.Equal(t, uint64(1), ack.Sequence)
	// Wait: the newest event of its op, by direct get of the last message
	// of the op's subjects, and by sequence.
	st, err := ag.js.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	last, err := oplog.Last(ctx, st, op.Workspace, op.ID)
	require.NoError(t, err)
	assert.Equal(t, events.TypeDecided, last.Type)
	raw, err := st.GetMsg(ctx, last.Seq)
	require.NoError(t, err)
	assert.Equal(t, events.OpEventSubject("ws", opID, "echo", events.TypeDecided), raw.Subject)
	raw, err = st.GetLastMsgForSubject(ctx, events.OpEventSubject("ws", opID, "echo", events.TypeDecided))
	require.NoError(t, err)
	assert.Equal(t, last.Seq, raw.Sequence)
	assert.Zero(t, ag.count())

	opsBefore := e.msgs(t, streams.Ops)
	for _, subject := range []string{
		events.RequestSubject("ws", "other"), // another agent's name
		events.ResolveSubject("ws", "approver"),
		events.OpEventSubject("ws", "x", "y", events.TypeDecided),
		events.ControlSubject("ws", "operator"),
		events.RejectedSubject("ws"),
		events.ModeSubject("ws"),
		events.ReplyPrefix("other") + "x", // another agent's answers
		events.ReplyPrefix("agent") + "x", // its own: only Airlock answers
		"$JS.API.STREAM.PURGE." + streams.Ops,
		"$JS.API.STREAM.DELETE." + streams.Ops,
		"$JS.API.STREAM.UPDATE." + streams.Requests,
		"$JS.API.STREAM.CREATE.EVIL",
		"$JS.API.STREAM.MSG.DELETE." + streams.Ops,
		"$JS.API.STREAM.MSG.DELETE." + streams.Requests, // only Airlock erases requests
		"$JS.API.STREAM.MSG.GET." + streams.Ops,
		"$JS.API.CONSUMER.CREATE." + streams.Ops + ".x",
		"$JS.API.CONSUMER.DELETE." + streams.Requests + "." + streams.GateConsumer,
		"$JS.API.DIRECT.GET." + streams.Requests, // other agents' arguments
		"$JS.API.STREAM.INFO." + streams.Requests,
		"$JS.API.INFO",
		"$SYS.REQ.USER.INFO",
		"_INBOX.someone",
		events.QueryLiveSubject, // whether anyone watches is not an agent's business
	} {
		ag.refused(t, subject)
	}
	for _, subject := range []string{events.ReplyPrefix("other") + ">", "airlock.v1.reply.>", "airlock.v1.>", ">"} {
		ag.subRefused(t, subject)
	}
	assert.Equal(t, opsBefore, e.msgs(t, streams.Ops), "nothing landed in the ops stream")
	assert.Equal(t, uint64(1), e.msgs(t, streams.Requests), "only the request landed")

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = ag.js.OrderedConsumer(short, streams.Ops, jetstream.OrderedConsumerConfig{})
	assert.Error(t, err)
	err = ag.js.DeleteStream(short, streams.Ops)
	assert.Error(t, err)
	_, err = e.js.Stream(ctx, streams.Ops)
	assert.NoError(t, err)
}

// Airlock's answers on airlock.v1.reply.<agent>.> reach that agent in the
// clients account, and no other agent.
func TestRepliesReachOnlyTheirAgent(t *testing.T) {
	e := start(t, map[string]authority.Role{"agent2": authority.RoleAgent})
	ag := e.connect(t, "agent")
	ag2 := e.connect(t, "agent2")
	mine, err := ag.nc.SubscribeSync(events.ReplyPrefix("agent") + ">")
	require.NoError(t, err)
	require.NoError(t, ag.nc.Flush())
	theirs, err := ag2.nc.SubscribeSync(events.ReplyPrefix("agent2") + ">")
	require.NoError(t, err)
	inboxes, err := ag2.nc.SubscribeSync("_INBOX.>")
	require.NoError(t, err)
	require.NoError(t, ag2.nc.Flush())
	ag2.subRefused(t, events.ReplyPrefix("agent")+">")
	ag2.subRefused(t, events.ReplyPrefix("agent")+"x")
	ag2.refused(t, events.ReplyPrefix("agent")+"x")

	require.NoError(t, e.svc.Publish(events.ReplyPrefix("agent")+"tok.op_1", []byte("yours")))
	require.NoError(t, e.svc.Publish(events.ReplyPrefix("agent2")+"tok.op_2", []byte("agent2's")))
	m, err := mine.NextMsg(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, events.ReplyPrefix("agent")+"tok.op_1", m.Subject)
	assert.Equal(t, "yours", string(m.Data))
	m, err = theirs.NextMsg(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "agent2's", string(m.Data))
	// Each got exactly its own.
	_, err = mine.NextMsg(100 * time.Millisecond)
	assert.ErrorIs(t, err, nats.ErrTimeout)
	_, err = theirs.NextMsg(100 * time.Millisecond)
	assert.ErrorIs(t, err, nats.ErrTimeout)
	_, err = inboxes.NextMsg(100 * time.Millisecond)
	assert.ErrorIs(t, err, nats.ErrTimeout)
	assert.Zero(t, ag.count())
}

// The agent's permissions are what producers.Client needs: it submits,
// reads the outcome back from the ops stream and queries the projection.
func TestAgentRunsProducersClient(t *testing.T) {
	e := start(t, nil)
	ctx := context.Background()
	ag := e.connect(t, "agent")

	req := events.Request{Workspace: "ws", Agent: "agent", Tool: "echo", Args: json.RawMessage(`{"x":1}`)}
	require.NoError(t, req.Validate())
	_, id := req.Identity()
	// The op is already denied: Submit publishes, then finds the outcome
	// by reading the op's newest event.
	st, err := e.js.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	_, err = testenv.Writer(t, e.js).Append(ctx, st, oplog.Op{Workspace: "ws", ID: id, Tool: "echo"}, 0, events.TypeDenied, "test",
		&events.Denied{OpHeader: events.OpHeader{OpID: id, Workspace: "ws"}, Request: &events.Summary{Tool: "echo"},
			Code: events.CodeCapabilityDenied, Reason: "no"})
	require.NoError(t, err)

	// A query endpoint, served by the service.
	e.respond(t, events.QueryOpSubject, `{"op_id":"`+id+`","state":"denied"}`)

	c, err := producers.New(ag.nc, producers.WithPollInterval(20*time.Millisecond), producers.WithWait(10*time.Second))
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	out, err := c.Submit(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, id, out.OpID)
	assert.Equal(t, events.StateDenied, out.State)
	assert.Equal(t, events.CodeCapabilityDenied, out.Code)
	assert.False(t, out.Pending)

	got, err := c.Op(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, events.StateDenied, got.State)
	assert.Zero(t, ag.count(), "no permission violations")
	assert.Equal(t, uint64(1), e.msgs(t, streams.Requests))
}

func TestApproverResolvesOnlyAsItself(t *testing.T) {
	e := start(t, map[string]authority.Role{"approver2": authority.RoleApprover})
	ctx := context.Background()
	// The gate's view: every resolution, and who sent it.
	resolutions := e.respond(t, events.ResolveSubjects, `{"ok":true}`)

	ap := e.connect(t, "approver")
	ap2 := e.connect(t, "approver2")
	// A request through the import, answered through it.
	resp, err := ap.nc.Request(events.ResolveSubject("ws", "approver"), []byte(`{"approve":true}`), 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, `{"ok":true}`, string(resp.Data))
	ap.refused(t, events.ResolveSubject("ws", "approver2"))
	require.NoError(t, ap2.nc.Publish(events.ResolveSubject("ws", "approver2"), []byte(`{"approve":false}`)))
	ap2.refused(t, events.ResolveSubject("ws", "approver"))
	require.NoError(t, ap2.nc.Flush())

	var who []authority.Principal
	for range 2 {
		var subject string
		select {
		case subject = <-resolutions:
		case <-time.After(5 * time.Second):
			t.Fatal("no resolution")
		}
		ws, name, ok := events.CommandSubjectParts(subject)
		require.True(t, ok)
		assert.Equal(t, "ws", ws)
		p, ok := e.set.Lookup(name)
		require.True(t, ok)
		who = append(who, p)
	}
	select {
	case s := <-resolutions:
		t.Fatalf("refused resolution %s arrived", s)
	case <-time.After(100 * time.Millisecond):
	}
	want1, _ := e.set.Lookup("approver")
	want2, _ := e.set.Lookup("approver2")
	assert.ElementsMatch(t, []authority.Principal{want1, want2}, who)

	// It reads both streams, by sequence and by last subject, and writes
	// to neither.
	op := e.appendDecided(t, "ws", opID)
	_, err = e.js.Publish(ctx, events.RequestSubject("ws", "agent"), []byte(`{"args":1}`))
	require.NoError(t, err)
	for _, name := range []string{streams.Ops, streams.Requests} {
		st, err := ap.js.Stream(ctx, name)
		require.NoError(t, err)
		raw, err := st.GetMsg(ctx, 1)
		require.NoError(t, err, name)
		assert.NotEmpty(t, raw.Data)
	}
	st, err := ap.js.Stream(ctx, streams.Requests)
	require.NoError(t, err)
	raw, err := st.GetLastMsgForSubject(ctx, events.RequestSubject("ws", "agent"))
	require.NoError(t, err)
	assert.Equal(t, `{"args":1}`, string(raw.Data))
	st, err = ap.js.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	_, err = oplog.Last(ctx, st, op.Workspace, op.ID)
	require.NoError(t, err)
	for _, subject := range []string{
		events.RequestSubject("ws", "approver"),
		events.OpEventSubject("ws", opID, "echo", events.TypeClaimed),
		events.ControlSubject("ws", "approver"),
		events.ReplyPrefix("agent") + "x",
		"$JS.API.STREAM.PURGE." + streams.Requests,
		"$JS.API.STREAM.MSG.DELETE." + streams.Requests,
		"$JS.API.CONSUMER.CREATE." + streams.Ops + ".x",
	} {
		ap.refused(t, subject)
	}
	assert.Equal(t, uint64(1), e.msgs(t, streams.Ops))
	assert.Equal(t, uint64(1), e.msgs(t, streams.Requests))
}

func TestOperatorControlsOnlyAsItself(t *testing.T) {
	e := start(t, map[string]authority.Role{"operator2": authority.RoleOperator})
	ctls := e.respond(t, events.ControlSubjects, `{"mode":"paused"}`)

	o := e.connect(t, "operator")
	resp, err := o.nc.Request(events.ControlSubject("ws", "operator"), []byte(`{"cmd":"pause"}`), 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, `{"mode":"paused"}`, string(resp.Data))
	o.refused(t, events.ControlSubject("ws", "operator2"))
	o.refused(t, events.ResolveSubject("ws", "operator"))
	o.refused(t, events.RequestSubject("ws", "operator"))
	o.refused(t, events.ModeSubject("ws"))
	o.refused(t, "$JS.API.STREAM.DELETE."+streams.Ops)
	select {
	case subject := <-ctls:
		_, name, ok := events.CommandSubjectParts(subject)
		require.True(t, ok)
		assert.Equal(t, "operator", name)
	case <-time.After(5 * time.Second):
		t.Fatal("no control")
	}
	select {
	case s := <-ctls:
		t.Fatalf("refused control %s arrived", s)
	case <-time.After(100 * time.Millisecond):
	}

	// It reads the requests stream by sequence.
	_, err = e.js.Publish(context.Background(), events.RequestSubject("ws", "agent"), []byte(`{"args":1}`))
	require.NoError(t, err)
	st, err := o.js.Stream(context.Background(), streams.Requests)
	require.NoError(t, err)
	raw, err := st.GetMsg(context.Background(), 1)
	require.NoError(t, err)
	assert.Equal(t, `{"args":1}`, string(raw.Data))
	assert.Equal(t, uint64(1), e.msgs(t, streams.Requests))
	assert.Zero(t, e.msgs(t, streams.Ops))
}

// The auditor reads both streams without a consumer and queries; replay
// with its own consumers is not possible in the clients account yet.
func TestAuditorReadsWritesNothing(t *testing.T) {
	e := start(t, nil)
	ctx := context.Background()
	au := e.connect(t, "auditor")

	e.appendDecided(t, "ws", opID)
	_, err := e.js.Publish(ctx, events.RequestSubject("ws", "agent"), []byte(`{"args":1}`))
	require.NoError(t, err)
	for _, name := range []string{streams.Ops, streams.Requests} {
		st, err := au.js.Stream(ctx, name)
		require.NoError(t, err)
		_, err = st.GetMsg(ctx, 1)
		require.NoError(t, err, name)
	}
	e.respond(t, events.QueryOpsSubject, `[]`)
	resp, err := au.nc.Request(events.QueryOpsSubject, []byte(`{}`), 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, `[]`, string(resp.Data))
	assert.Zero(t, au.count())

	for _, subject := range []string{
		events.RequestSubject("ws", "auditor"),
		events.OpEventSubject("ws", opID, "echo", events.TypeClaimed),
		events.RejectedSubject("ws"),
		events.ResolveSubject("ws", "auditor"),
		events.ControlSubject("ws", "auditor"),
		events.ReplyPrefix("agent") + "x",
		"airlock.v1.sys.x",
		"$JS.API.INFO",
		"$JS.API.STREAM.NAMES",
		"$JS.API.STREAM.MSG.GET." + streams.Ops,
		"$JS.API.STREAM.PURGE." + streams.Ops,
		"$JS.API.STREAM.MSG.DELETE." + streams.Requests,
		"$JS.API.CONSUMER.CREATE." + streams.Ops,
		"$JS.API.CONSUMER.MSG.NEXT." + streams.Requests + "." + streams.GateConsumer,
		"$JS.ACK." + streams.Requests + "." + streams.GateConsumer + ".1.1.1.1.1",
	} {
		au.refused(t, subject)
	}
	au.subRefused(t, "airlock.v1.>")
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = au.js.OrderedConsumer(short, streams.Ops, jetstream.OrderedConsumerConfig{})
	assert.Error(t, err, "no consumers for auditors yet")
	assert.Equal(t, uint64(1), e.msgs(t, streams.Ops))
	assert.Equal(t, uint64(1), e.msgs(t, streams.Requests))
}

// Approvers, operators and auditors may watch the op events, rejections
// and records live, through the stream imports; agents may not: an agent
// sees its own replies only. Nothing a watcher receives is stored again.
func TestWatchersSeeEventsLiveAgentsDoNot(t *testing.T) {
	e := start(t, nil)
	ctx := context.Background()
	ag := e.connect(t, "agent")
	for _, s := range []string{"airlock.v1.live.>", "airlock.v1.live.op.>", "airlock.v1.live.op.ws.>", "airlock.v1.op.>", "airlock.v1.rejected.>", "airlock.v1.sys.>"} {
		ag.subRefused(t, s)
	}
	// Its allowed subscriptions see none of it.
	agInbox, err := ag.nc.SubscribeSync("_INBOX.>")
	require.NoError(t, err)
	agReplies, err := ag.nc.SubscribeSync(events.ReplyPrefix("agent") + ">")
	require.NoError(t, err)
	require.NoError(t, ag.nc.Flush())

	published := []string{
		events.OpEventSubject("ws", opID, "echo", events.TypeDecided),
		events.RejectedSubject("ws"),
		events.ModeSubject("ws"),
	}
	type watcher struct {
		c          *client
		subs       []*nats.Subscription // one per published subject
		violations int                  // the refusals above
	}
	var watchers []watcher
	for _, name := range []string{"approver", "operator", "auditor"} {
		c := e.connect(t, name)
		// Never the requests, which carry args, nor anyone's replies, nor
		// the appends themselves (only what the stream stored).
		for _, s := range []string{"airlock.v1.>", "airlock.v1.req.>", "airlock.v1.req.ws.agent", "airlock.v1.reply.>", "airlock.v1.op.>", "airlock.v1.sys.>"} {
			c.subRefused(t, s)
		}
		before := c.count()
		w := watcher{c: c, violations: before}
		for _, s := range authority.WatchSubjects() {
			sub, err := c.nc.SubscribeSync(s)
			require.NoError(t, err)
			w.subs = append(w.subs, sub)
		}
		require.NoError(t, c.nc.Flush())
		assert.Equal(t, before, c.count(), "%s may watch", name)
		watchers = append(watchers, w)
	}

	// The service appends an op event, a rejection and a mode record.
	e.appendDecided(t, "ws", opID)
	for _, subject := range published[1:] {
		_, err := e.js.Publish(ctx, subject, []byte(`{}`))
		require.NoError(t, err)
	}
	for _, w := range watchers {
		for _, sub := range w.subs {
			for i, subject := range published {
				m, err := sub.NextMsg(5 * time.Second)
				require.NoError(t, err)
				assert.Equal(t, events.LiveSubject(subject), m.Subject)
				// As stored: the stream's headers name the message.
				assert.Equal(t, streams.Ops, m.Header.Get(jetstream.StreamHeader))
				assert.Equal(t, subject, m.Header.Get(jetstream.SubjectHeader))
				assert.Equal(t, strconv.Itoa(i+1), m.Header.Get(jetstream.SequenceHeader))
				assert.NotEmpty(t, m.Header.Get("Nats-Last-Sequence"))
			}
			_, err := sub.NextMsg(50 * time.Millisecond)
			assert.ErrorIs(t, err, nats.ErrTimeout, "exactly one each")
		}
		assert.Equal(t, w.violations, w.c.count())
	}
	// The clients account stores nothing: the stream holds what the
	// service appended, once.
	assert.Equal(t, uint64(3), e.msgs(t, streams.Ops))
	for _, sub := range []*nats.Subscription{agInbox, agReplies} {
		_, err := sub.NextMsg(200 * time.Millisecond)
		assert.ErrorIs(t, err, nats.ErrTimeout)
	}
}
