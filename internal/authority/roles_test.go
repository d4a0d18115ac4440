package authority_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/producers"
	"github.com/nats-io/nats-server/v2/server"
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
	_, err = oplog.Append(ctx, e.js, st, op, 0, events.TypeDecided, "test",
		&events.Decided{OpHeader: events.OpHeader{OpID: id, Workspace: ws}, Request: &events.Summary{Tool: "echo"}, PolicyHash: "p"})
	require.NoError(t, err)
	return op
}

const opID = "op_0123456789abcdef0123456789abcdef"

func TestEveryPrincipalConnectsAndNoOneElse(t *testing.T) {
	e := start(t, map[string]authority.Role{"approver2": authority.RoleApprover})
	for _, p := range e.set.Principals() {
		t.Run(p.Name, func(t *testing.T) {
			c := e.connect(t, p.Name)
			assert.True(t, c.nc.IsConnected())
			// Replies reach every principal: a JetStream API answer is one.
			if p.Role != authority.RoleAgent {
				_, err := c.js.Stream(context.Background(), streams.Requests)
				require.NoError(t, err)
			}
			_, err := c.js.Stream(context.Background(), streams.Ops)
			require.NoError(t, err)
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
}

func TestAgentSubmitsAndReadsButWritesNothingElse(t *testing.T) {
	e := start(t, nil)
	ctx := context.Background()
	ag := e.connect(t, "agent")
	op := e.appendDecided(t, "ws", opID)

	// Submit: a JetStream publish to the requests stream, acknowledged.
	ack, err := ag.js.Publish(ctx, events.RequestSubject("ws"), []byte(`{}`), jetstream.WithMsgID("fp-1"))
	require.NoError(t, err)
	assert.Equal(t, streams.Requests, ack.Stream)
	assert.Equal(t, uint64(1), ack.Sequence)
	// Wait: the newest event of its op, by direct get.
	st, err := ag.js.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	last, err := oplog.Last(ctx, st, op.Workspace, op.ID)
	require.NoError(t, err)
	assert.Equal(t, events.TypeDecided, last.Type)
	raw, err := st.GetMsg(ctx, last.Seq)
	require.NoError(t, err)
	assert.Equal(t, events.OpEventSubject("ws", opID, "echo", events.TypeDecided), raw.Subject)
	assert.Zero(t, ag.count())

	opsBefore := e.msgs(t, streams.Ops)
	for _, subject := range []string{
		events.ResolveSubject("ws", "approver"),
		events.OpEventSubject("ws", "x", "y", events.TypeDecided),
		events.ControlSubject("ws", "operator"),
		events.RejectedSubject("ws"),
		"airlock.v1.sys.shutdown",
		"$JS.API.STREAM.PURGE." + streams.Ops,
		"$JS.API.STREAM.DELETE." + streams.Ops,
		"$JS.API.STREAM.UPDATE." + streams.Requests,
		"$JS.API.STREAM.CREATE.EVIL",
		"$JS.API.STREAM.MSG.DELETE." + streams.Ops,
		"$JS.API.CONSUMER.CREATE." + streams.Ops + ".x",
		"$JS.API.CONSUMER.DELETE." + streams.Requests + "." + streams.GateConsumer,
		"$JS.API.DIRECT.GET." + streams.Requests, // other agents' arguments
		"$JS.API.STREAM.INFO." + streams.Requests,
		"$JS.API.INFO",
		"_INBOX.someone",
	} {
		ag.refused(t, subject)
	}
	assert.Equal(t, opsBefore, e.msgs(t, streams.Ops), "nothing landed in the ops stream")
	assert.Equal(t, uint64(1), e.msgs(t, streams.Requests), "only the request landed")

	// The JetStream API says no as well: the request goes unanswered.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = ag.js.OrderedConsumer(short, streams.Ops, jetstream.OrderedConsumerConfig{})
	assert.Error(t, err)
	err = ag.js.DeleteStream(short, streams.Ops)
	assert.Error(t, err)
	_, err = e.js.Stream(ctx, streams.Ops)
	assert.NoError(t, err)
}

// The agent's permissions are what producers.Client needs: it submits,
// reads the outcome back from the ops stream and queries the projection.
func TestAgentRunsProducersClient(t *testing.T) {
	e := start(t, nil)
	ctx := context.Background()
	ag := e.connect(t, "agent")

	req := events.Request{Workspace: "ws", Agent: "a1", Tool: "echo", Args: json.RawMessage(`{"x":1}`)}
	require.NoError(t, req.Validate())
	_, id := req.Identity()
	// The op is already denied: Submit publishes, then finds the outcome
	// by reading the op's newest event.
	st, err := e.js.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	_, err = oplog.Append(ctx, e.js, st, oplog.Op{Workspace: "ws", ID: id, Tool: "echo"}, 0, events.TypeDenied, "test",
		&events.Denied{OpHeader: events.OpHeader{OpID: id, Workspace: "ws"}, Request: &events.Summary{Tool: "echo"},
			Code: events.CodeCapabilityDenied, Reason: "no"})
	require.NoError(t, err)

	// A query endpoint, served by the service.
	sub, err := e.svc.Subscribe(events.QueryOpSubject, func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"op_id":"` + id + `","state":"denied"}`))
	})
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, e.svc.Flush())

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
	resolutions, err := e.svc.SubscribeSync(events.ResolveSubjects)
	require.NoError(t, err)
	require.NoError(t, e.svc.Flush())

	ap := e.connect(t, "approver")
	ap2 := e.connect(t, "approver2")
	require.NoError(t, ap.nc.Publish(events.ResolveSubject("ws", "approver"), []byte(`{"approve":true}`)))
	ap.refused(t, events.ResolveSubject("ws", "approver2"))
	require.NoError(t, ap2.nc.Publish(events.ResolveSubject("ws", "approver2"), []byte(`{"approve":false}`)))
	ap2.refused(t, events.ResolveSubject("ws", "approver"))
	require.NoError(t, ap.nc.Flush())
	require.NoError(t, ap2.nc.Flush())

	var who []authority.Principal
	for range 2 {
		m, err := resolutions.NextMsg(5 * time.Second)
		require.NoError(t, err)
		ws, name, ok := events.CommandSubjectParts(m.Subject)
		require.True(t, ok)
		assert.Equal(t, "ws", ws)
		p, ok := e.set.Lookup(name)
		require.True(t, ok)
		who = append(who, p)
	}
	_, err = resolutions.NextMsg(100 * time.Millisecond)
	assert.ErrorIs(t, err, nats.ErrTimeout, "the refused resolutions never arrived")
	want1, _ := e.set.Lookup("approver")
	want2, _ := e.set.Lookup("approver2")
	assert.ElementsMatch(t, []authority.Principal{want1, want2}, who)

	// It reads both streams, and writes to neither.
	op := e.appendDecided(t, "ws", opID)
	_, err = e.js.Publish(ctx, events.RequestSubject("ws"), []byte(`{"args":1}`))
	require.NoError(t, err)
	for _, name := range []string{streams.Ops, streams.Requests} {
		st, err := ap.js.Stream(ctx, name)
		require.NoError(t, err)
		raw, err := st.GetMsg(ctx, 1)
		require.NoError(t, err, name)
		assert.NotEmpty(t, raw.Data)
	}
	st, err := ap.js.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	_, err = oplog.Last(ctx, st, op.Workspace, op.ID)
	require.NoError(t, err)
	for _, subject := range []string{
		events.RequestSubject("ws"),
		events.OpEventSubject("ws", opID, "echo", events.TypeClaimed),
		events.ControlSubject("ws", "approver"),
		"$JS.API.STREAM.PURGE." + streams.Requests,
		"$JS.API.CONSUMER.CREATE." + streams.Ops + ".x",
	} {
		ap.refused(t, subject)
	}
	assert.Equal(t, uint64(1), e.msgs(t, streams.Ops))
	assert.Equal(t, uint64(1), e.msgs(t, streams.Requests))
}

func TestOperatorControlsOnlyAsItself(t *testing.T) {
	e := start(t, map[string]authority.Role{"operator2": authority.RoleOperator})
	ctls, err := e.svc.SubscribeSync(events.ControlSubjects)
	require.NoError(t, err)
	require.NoError(t, e.svc.Flush())

	o := e.connect(t, "operator")
	require.NoError(t, o.nc.Publish(events.ControlSubject("ws", "operator"), []byte(`{"cmd":"pause"}`)))
	o.refused(t, events.ControlSubject("ws", "operator2"))
	o.refused(t, events.ResolveSubject("ws", "operator"))
	o.refused(t, events.RequestSubject("ws"))
	o.refused(t, "$JS.API.STREAM.DELETE."+streams.Ops)
	m, err := ctls.NextMsg(5 * time.Second)
	require.NoError(t, err)
	_, name, ok := events.CommandSubjectParts(m.Subject)
	require.True(t, ok)
	assert.Equal(t, "operator", name)
	_, err = ctls.NextMsg(100 * time.Millisecond)
	assert.ErrorIs(t, err, nats.ErrTimeout)
	assert.Zero(t, e.msgs(t, streams.Requests))
}

func TestAuditorReadsEverythingWritesNothing(t *testing.T) {
	e := start(t, nil)
	ctx := context.Background()
	// The gate's durable consumers, which the auditor must leave alone.
	_, err := e.js.CreateOrUpdateConsumer(ctx, streams.Requests, jetstream.ConsumerConfig{
		Durable: streams.GateConsumer, AckPolicy: jetstream.AckExplicitPolicy,
	})
	require.NoError(t, err)
	_, err = e.js.CreateOrUpdateConsumer(ctx, streams.Ops, jetstream.ConsumerConfig{
		Durable: streams.ResumeConsumer, AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: events.GrantedSubjects,
	})
	require.NoError(t, err)
	au := e.connect(t, "auditor")
	live, err := au.nc.SubscribeSync(events.SubjectRoot + ".>")
	require.NoError(t, err)
	require.NoError(t, au.nc.Flush())

	e.appendDecided(t, "ws", opID)
	_, err = e.js.Publish(ctx, events.RequestSubject("ws"), []byte(`{"args":1}`))
	require.NoError(t, err)

	// Live events.
	for _, want := range []string{events.OpEventSubject("ws", opID, "echo", events.TypeDecided), events.RequestSubject("ws")} {
		m, err := live.NextMsg(5 * time.Second)
		require.NoError(t, err)
		assert.Equal(t, want, m.Subject)
	}

	// Replay: an ordered consumer on each stream, from the start.
	for _, name := range []string{streams.Ops, streams.Requests} {
		cons, err := au.js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{})
		require.NoError(t, err, name)
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		var n int
		for range batch.Messages() {
			n++
		}
		require.NoError(t, batch.Error())
		assert.Equal(t, 1, n, name)
		info, err := cons.Info(ctx)
		require.NoError(t, err)
		require.NoError(t, au.js.DeleteConsumer(ctx, name, info.Name))

		st, err := au.js.Stream(ctx, name)
		require.NoError(t, err)
		_, err = st.GetMsg(ctx, 1)
		require.NoError(t, err)
		_, err = st.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(">"))
		require.NoError(t, err)
	}
	var names []string
	for n := range au.js.StreamNames(ctx).Name() {
		names = append(names, n)
	}
	assert.ElementsMatch(t, []string{streams.Ops, streams.Requests}, names)
	_, err = au.js.AccountInfo(ctx)
	require.NoError(t, err)
	assert.Zero(t, au.count())

	for _, subject := range []string{
		events.RequestSubject("ws"),
		events.OpEventSubject("ws", opID, "echo", events.TypeClaimed),
		events.RejectedSubject("ws"),
		events.ResolveSubject("ws", "auditor"),
		events.ControlSubject("ws", "auditor"),
		"airlock.v1.sys.x",
		"$JS.API.STREAM.PURGE." + streams.Ops,
		"$JS.API.STREAM.MSG.DELETE." + streams.Ops,
		"$JS.API.STREAM.UPDATE." + streams.Ops,
		"$JS.API.CONSUMER.DURABLE.CREATE." + streams.Ops + ".mine",
		"$JS.API.CONSUMER.DELETE." + streams.Requests + "." + streams.GateConsumer,
		"$JS.API.CONSUMER.MSG.NEXT." + streams.Requests + "." + streams.GateConsumer,
		"$JS.API.CONSUMER.CREATE." + streams.Requests + "." + streams.GateConsumer,
		"$JS.API.CONSUMER.CREATE." + streams.Requests + "." + streams.GateConsumer + ".airlock.v1.req.>",
		"$JS.ACK." + streams.Requests + "." + streams.GateConsumer + ".1.1.1.1.1",
		"$JS.API.CONSUMER.DELETE." + streams.Ops + "." + streams.ResumeConsumer,
		"$JS.API.CONSUMER.MSG.NEXT." + streams.Ops + "." + streams.ResumeConsumer,
		"$JS.API.CONSUMER.CREATE." + streams.Ops + "." + streams.ResumeConsumer + "." + events.GrantedSubjects,
	} {
		au.refused(t, subject)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = au.js.Publish(short, events.RequestSubject("ws"), []byte(`{}`))
	assert.Error(t, err)
	assert.Equal(t, uint64(1), e.msgs(t, streams.Ops))
	assert.Equal(t, uint64(1), e.msgs(t, streams.Requests))
	_, err = e.js.Consumer(ctx, streams.Requests, streams.GateConsumer)
	assert.NoError(t, err, "the gate's consumer survives")
	_, err = e.js.Consumer(ctx, streams.Ops, streams.ResumeConsumer)
	assert.NoError(t, err, "the resume consumer survives")
}

// The server config rendered for an external server admits the same users
// with the same permissions, included from a main config as
// deploy/nats-server.conf says.
func TestServerConfigMatchesServerUsers(t *testing.T) {
	data := t.TempDir()
	_, err := authority.Add(data, "approver2", authority.RoleApprover)
	require.NoError(t, err)
	set, err := authority.Ensure(data)
	require.NoError(t, err)
	path := filepath.Join(data, authority.AuthConfigFile)
	require.NoError(t, set.WriteServerConfig(path))
	main := filepath.Join(data, "nats-server.conf")
	require.NoError(t, os.WriteFile(main, []byte("listen: 127.0.0.1:-1\n"+
		"jetstream { store_dir: \""+filepath.Join(data, "js")+"\" }\n"+
		"include \""+authority.AuthConfigFile+"\"\n"), 0o600))

	opts, err := server.ProcessConfigFile(main)
	require.NoError(t, err)
	want := set.ServerUsers()
	require.Len(t, opts.Nkeys, len(want))
	for i, u := range opts.Nkeys {
		assert.Equal(t, want[i].Nkey, u.Nkey)
		assert.Equal(t, want[i].Permissions, u.Permissions, want[i].Nkey)
	}
	assert.Empty(t, opts.Users)
	assert.Empty(t, opts.NoAuthUser)

	// A server run from it enforces them.
	opts.NoSigs = true
	srv, err := server.NewServer(opts)
	require.NoError(t, err)
	srv.Start()
	defer srv.Shutdown()
	require.True(t, srv.ReadyForConnections(10*time.Second))
	_, err = nats.Connect(srv.ClientURL())
	assert.ErrorIs(t, err, nats.ErrAuthorization)
	e := &env{set: set, srv: srv}
	ap2 := e.connect(t, "approver2")
	require.NoError(t, ap2.nc.Publish(events.ResolveSubject("ws", "approver2"), nil))
	ap2.refused(t, events.ResolveSubject("ws", "approver"))
}
