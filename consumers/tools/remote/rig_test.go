package remote_test

import (
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/consumers/tools/remote"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

const (
	subject = "tools.t"
	status  = subject + remote.StatusSuffix
	opID    = "op_0123456789abcdef0123456789abcdef"
	timeout = 300 * time.Millisecond
)

// rig is an embedded NATS server, Airlock's connection to it and a tool
// server's connection of its own, on which a test scripts the server.
type rig struct {
	n   *testenv.NATS
	srv *nats.Conn
}

func newRig(t *testing.T) *rig {
	t.Helper()
	n := testenv.StartNATS(t, streams.Config{})
	srv, err := nats.Connect(n.Server.ClientURL())
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return &rig{n: n, srv: srv}
}

// on answers messages on subj with h, on the tool server's connection.
func (g *rig) on(t *testing.T, subj string, h nats.MsgHandler) {
	t.Helper()
	sub, err := g.srv.Subscribe(subj, h)
	require.NoError(t, err)
	require.NoError(t, g.srv.Flush())
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

// remote is a Remote for tool "t" on subject, with short timeouts.
func (g *rig) remote(t *testing.T) *remote.Remote {
	t.Helper()
	r, err := remote.New(remote.Config{Conn: g.n.Conn, Tool: "t", Subject: subject, Timeout: timeout, StatusTimeout: timeout})
	require.NoError(t, err)
	return r
}

func call() executor.Call {
	return executor.Call{OpID: opID, Workspace: "w", Agent: "a", Tool: "t", Attempt: "A1", Args: json.RawMessage(`{"x":1}`)}
}

// answer replies body to every message.
func answer(body string) nats.MsgHandler {
	return func(m *nats.Msg) { _ = m.Respond([]byte(body)) }
}

// silent receives and never answers.
func silent(*nats.Msg) {}

// counted wraps h, counting the messages it handles.
func counted(n *atomic.Int32, h nats.MsgHandler) nats.MsgHandler {
	return func(m *nats.Msg) {
		n.Add(1)
		h(m)
	}
}
