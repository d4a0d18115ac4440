package testenv

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/natsrv"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// NATS is an embedded server with JetStream and a connection to it.
type NATS struct {
	Server    *server.Server
	Conn      *nats.Conn
	JetStream jetstream.JetStream
	Dir       string
}

// StartNATS starts an embedded server in a temporary directory with
// Airlock's streams provisioned; it stops at the end of the test.
func StartNATS(t testing.TB, sc streams.Config) *NATS {
	t.Helper()
	dir := t.TempDir()
	s, err := natsrv.Start(natsrv.Config{DataDir: dir, Listen: "127.0.0.1:-1"})
	require.NoError(t, err)
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	require.NoError(t, streams.Provision(context.Background(), js, sc))
	t.Cleanup(func() {
		nc.Close()
		s.Shutdown()
		s.WaitForShutdown()
	})
	return &NATS{Server: s, Conn: nc, JetStream: js, Dir: dir}
}

// OpEvents lists the types of every event of one op, in stream order.
func OpEvents(t testing.TB, js jetstream.JetStream, ws, op string) []events.Type {
	t.Helper()
	var types []events.Type
	for _, m := range OpMessages(t, js, ws, op) {
		types = append(types, events.Type(m.Headers().Get(events.HeaderPrefix+"type")))
	}
	return types
}

// OpMessages reads every event of one op the ops stream holds, in
// stream order.
func OpMessages(t testing.TB, js jetstream.JetStream, ws, op string) []jetstream.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, streams.Ops, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.OpFilter(ws, op)}})
	require.NoError(t, err)
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	if info.NumPending == 0 {
		return nil
	}
	batch, err := cons.Fetch(int(info.NumPending), jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	require.NoError(t, batch.Error())
	return msgs
}

// StaleRequestsResponder adds a responder to the requests stream's direct gets
// that has none of the messages stored after it, as a replica behind the
// leader answers: a mirror that takes part in the stream's direct gets
// (MirrorDirect) and mirrors one workspace's requests only. It joins the
// direct gets once it has caught up with the one message it mirrors;
// direct gets are then answered by it or by the stream, at random.
func StaleRequestsResponder(t testing.TB, n *NATS) {
	t.Helper()
	ctx := context.Background()
	_, err := n.JetStream.Publish(ctx, events.RequestSubject("elsewhere", "a"), []byte(`{}`))
	require.NoError(t, err)
	mirror, err := n.JetStream.CreateStream(ctx, jetstream.StreamConfig{
		Name:         "REQUESTS_BEHIND",
		Mirror:       &jetstream.StreamSource{Name: streams.Requests, FilterSubject: events.RequestSubject("elsewhere", ">")},
		MirrorDirect: true,
		AllowDirect:  true,
	})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := mirror.Info(ctx)
		return err == nil && info.State.Msgs == 1
	}, 10*time.Second, 10*time.Millisecond, "the mirror caught up")
}

// DeploymentDirs returns a function that makes data dirs of one
// deployment: each new and empty but for a copy of the same audit key, as
// an operator gives every instance of a deployment (its log is one).
func DeploymentDirs(t testing.TB) func() string {
	t.Helper()
	first := t.TempDir()
	_, _, err := audit.LoadOrCreateKey(first)
	require.NoError(t, err)
	return func() string {
		t.Helper()
		dir := t.TempDir()
		for _, f := range []string{audit.KeyFile, audit.PubFile} {
			b, err := os.ReadFile(filepath.Join(first, f))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o600))
		}
		return dir
	}
}

// Writer returns an op event writer on js, closed when the test ends.
func Writer(t testing.TB, js jetstream.JetStream) *oplog.Writer {
	t.Helper()
	w, err := oplog.NewWriter(js)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w
}
