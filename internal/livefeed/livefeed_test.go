package livefeed_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/livefeed"
	"github.com/airlock-dev/airlock/internal/natsrv"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rig is an embedded server with the streams provisioned, the feed off.
type rig struct {
	srv *server.Server
	set *authority.Set // nil without accounts
	nc  *nats.Conn     // Airlock's own connection
	js  jetstream.JetStream
}

func startRig(t *testing.T, auth bool) *rig {
	t.Helper()
	dir := t.TempDir()
	r := &rig{}
	cfg := natsrv.Config{DataDir: dir, Listen: "127.0.0.1:-1"}
	var opts []nats.Option
	if auth {
		var err error
		r.set, err = authority.Ensure(dir)
		require.NoError(t, err)
		cfg.AuthFile = filepath.Join(dir, authority.AuthConfigFile)
		require.NoError(t, r.set.WriteServerConfig(cfg.AuthFile))
		opt, err := authority.ConnectOption(r.set.CredsPath(authority.ServiceName))
		require.NoError(t, err)
		opts = append(opts, opt)
	}
	var err error
	r.srv, err = natsrv.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { r.srv.Shutdown(); r.srv.WaitForShutdown() })
	r.nc, err = nats.Connect("", append(opts, nats.InProcessServer(r.srv))...)
	require.NoError(t, err)
	t.Cleanup(r.nc.Close)
	r.js, err = jetstream.New(r.nc)
	require.NoError(t, err)
	require.NoError(t, streams.Provision(context.Background(), r.js, streams.Config{}))
	return r
}

// connect connects principal over TCP (any client without accounts).
func (r *rig) connect(t *testing.T, principal string) *nats.Conn {
	t.Helper()
	var opts []nats.Option
	if r.set != nil {
		opt, err := authority.ConnectOption(r.set.CredsPath(principal))
		require.NoError(t, err)
		opts = append(opts, opt)
	}
	nc, err := nats.Connect(r.srv.ClientURL(), opts...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

func (r *rig) live(t *testing.T) bool {
	t.Helper()
	on, err := streams.Live(context.Background(), r.js)
	require.NoError(t, err)
	return on
}

// appendOp stores one op event; its live copy is on events.LiveSubject.
func (r *rig) appendOp(t *testing.T, n int) string {
	t.Helper()
	subject := events.OpEventSubject("ws", "op_0123456789abcdef0123456789abcdef", "echo", events.TypeDecided)
	_, err := r.js.Publish(context.Background(), subject, []byte{byte('0' + n)})
	require.NoError(t, err)
	return events.LiveSubject(subject)
}

func (r *rig) feed(t *testing.T, account string, hold time.Duration) *livefeed.Feed {
	t.Helper()
	f, err := livefeed.New(livefeed.Config{
		JetStream: r.js, Server: r.srv, Account: account, Poll: 10 * time.Millisecond, Hold: hold,
	})
	require.NoError(t, err)
	require.Equal(t, livefeed.Auto, f.Mode(), "the default with a server")
	return f
}

func run(t *testing.T, f *livefeed.Feed) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// An auditor in the clients' account subscribes to part of the feed: its
// import makes it count in Airlock's account, Sync turns the feed on (no
// poll runs yet), and the auditor receives each message stored from its
// answer on. With the subscription gone, polls turn the feed off after
// Hold.
func TestFeedFollowsAWatcherInTheClientsAccount(t *testing.T) {
	r := startRig(t, true)
	f := r.feed(t, authority.ServiceAccount, 300*time.Millisecond)
	assert.False(t, f.Wanted(), "nobody subscribes")
	r.appendOp(t, 1) // not republished: nobody to see it

	auditor := r.connect(t, "auditor")
	sub, err := auditor.SubscribeSync(events.LivePrefix + "op.ws.>")
	require.NoError(t, err)
	require.NoError(t, auditor.Flush())

	// What a watcher does after subscribing: ask, through the clients'
	// account, as airlock watch does.
	st, err := f.Sync(context.Background())
	require.NoError(t, err)
	assert.Equal(t, events.LiveStatus{Live: true, Mode: "auto"}, st)
	assert.True(t, r.live(t))
	assert.Equal(t, int64(1), f.Subscribers())
	assert.True(t, f.On())

	subject := r.appendOp(t, 2)
	m, err := sub.NextMsg(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, subject, m.Subject)
	assert.Equal(t, "2", string(m.Data), "the first message stored after the answer, none before")
	assert.Equal(t, "2", m.Header.Get(jetstream.SequenceHeader))

	run(t, f)
	require.NoError(t, sub.Unsubscribe())
	require.NoError(t, auditor.Flush())
	// The Feed's own state follows the stream's update.
	require.Eventually(t, func() bool { return f.Changes() == 2 }, 10*time.Second, 20*time.Millisecond, "off after Hold")
	assert.False(t, f.On())
	assert.False(t, r.live(t))
	assert.Equal(t, int64(0), f.Subscribers())
}

// Which subscriptions count, on a server without accounts: any whose
// subject overlaps airlock.v1.live.>, wildcards either way, queue groups
// too; no other.
func TestFeedCountsOverlappingSubjects(t *testing.T) {
	r := startRig(t, false)
	f := r.feed(t, server.DEFAULT_GLOBAL_ACCOUNT, time.Second)
	nc := r.connect(t, "")
	for _, s := range []string{"airlock.v1.op.>", "airlock.v1.req.*.*", "_INBOX.>", "airlock.v1.q.live", "airlock.v2.>"} {
		_, err := nc.SubscribeSync(s)
		require.NoError(t, err, s)
	}
	require.NoError(t, nc.Flush())
	assert.False(t, f.Wanted(), "no subscription overlaps the feed")
	st, err := f.Sync(context.Background())
	require.NoError(t, err)
	assert.False(t, st.Live)
	assert.False(t, r.live(t))

	for _, s := range []string{">", "airlock.>", "airlock.v1.>", "airlock.*.live.op.>", "airlock.v1.live.op.ws.*.echo.completed", "*.*.*.*"} {
		_, err := nc.SubscribeSync(s)
		require.NoError(t, err, s)
	}
	_, err = nc.QueueSubscribeSync(events.LiveSubjects, "archivers")
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	assert.True(t, f.Wanted())
	assert.Equal(t, int64(7), f.Subscribers())
}

// A watcher that reconnects within Hold finds the feed still on: polls
// that count no subscriber do not turn it off before Hold.
func TestFeedHoldsThroughAReconnect(t *testing.T) {
	r := startRig(t, false)
	f := r.feed(t, server.DEFAULT_GLOBAL_ACCOUNT, 5*time.Second)
	run(t, f)
	watch := func() *nats.Conn {
		nc := r.connect(t, "")
		_, err := nc.SubscribeSync(events.LiveSubjects)
		require.NoError(t, err)
		require.NoError(t, nc.Flush())
		return nc
	}
	nc := watch()
	require.Eventually(t, func() bool { return f.On() && r.live(t) }, 5*time.Second, 10*time.Millisecond, "on within a few polls, without Sync")
	nc.Close() // the watcher's connection drops
	require.Eventually(t, func() bool { return f.Subscribers() == 0 }, 5*time.Second, 10*time.Millisecond, "polls count none")
	time.Sleep(100 * time.Millisecond) // more polls with no subscriber
	assert.True(t, r.live(t))
	watch() // and comes back
	require.Eventually(t, func() bool { return f.Subscribers() == 1 }, 5*time.Second, 10*time.Millisecond)
	assert.True(t, r.live(t))
	assert.Equal(t, uint64(1), f.Changes(), "never turned off")
}

// Mode On provisions the feed on, and Sync turns it on again after
// something else turned it off.
func TestFeedOnStaysOn(t *testing.T) {
	r := startRig(t, false)
	f, err := livefeed.New(livefeed.Config{JetStream: r.js})
	require.NoError(t, err)
	assert.Equal(t, livefeed.On, f.Mode(), "the default without a server")
	assert.True(t, f.Wanted())
	_, err = streams.SetLive(context.Background(), r.js, true)
	require.NoError(t, err)
	_, err = streams.SetLive(context.Background(), r.js, false) // an operator, by hand
	require.NoError(t, err)
	st, err := f.Sync(context.Background())
	require.NoError(t, err)
	assert.Equal(t, events.LiveStatus{Live: true, Mode: "on"}, st)
	assert.True(t, r.live(t))
	b, err := json.Marshal(st)
	require.NoError(t, err)
	assert.JSONEq(t, `{"live":true,"mode":"on"}`, string(b))
}

func TestConfigRefused(t *testing.T) {
	r := startRig(t, false)
	for name, c := range map[string]livefeed.Config{
		"no JetStream":         {Mode: livefeed.On},
		"auto without server":  {JetStream: r.js, Mode: livefeed.Auto, Account: "$G"},
		"auto without account": {JetStream: r.js, Mode: livefeed.Auto, Server: r.srv},
		"unknown mode":         {JetStream: r.js, Mode: "sometimes"},
	} {
		_, err := livefeed.New(c)
		assert.Error(t, err, name)
	}
	for _, s := range []string{"auto", "on"} {
		m, err := livefeed.ParseMode(s)
		require.NoError(t, err)
		assert.Equal(t, livefeed.Mode(s), m)
	}
	_, err := livefeed.ParseMode("off")
	assert.ErrorContains(t, err, "want auto or on")
}

// BenchmarkCount is one count of the subscribers in an account holding
// 1,000 other subscriptions, as each poll of mode auto makes it: walking
// them after a change, or seeing that nothing changed.
func BenchmarkCount(b *testing.B) {
	dir := b.TempDir()
	srv, err := natsrv.Start(natsrv.Config{DataDir: dir})
	require.NoError(b, err)
	b.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	nc, err := nats.Connect("", nats.InProcessServer(srv))
	require.NoError(b, err)
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(b, err)
	require.NoError(b, streams.Provision(context.Background(), js, streams.Config{}))
	for i := range 1000 {
		_, err := nc.SubscribeSync(events.ReplyPrefix("agent"+strconv.Itoa(i)) + ">")
		require.NoError(b, err)
	}
	require.NoError(b, nc.Flush())
	f, err := livefeed.New(livefeed.Config{JetStream: js, Server: srv, Account: server.DEFAULT_GLOBAL_ACCOUNT})
	require.NoError(b, err)
	for _, walk := range []bool{true, false} {
		name := "unchanged"
		if walk {
			name = "walk"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if walk {
					f.Forget()
				}
				if f.Count() != 0 {
					b.Fatal("no subscriber, yet counted")
				}
			}
		})
	}
}
