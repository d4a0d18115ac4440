package authority_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/natsrv"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// env is an embedded server that admits only the principals of its data
// directory, with Airlock's streams provisioned by the service, the live
// feed on.
type env struct {
	set *authority.Set
	srv *server.Server
	svc *nats.Conn // the service, in process
	js  jetstream.JetStream
}

// start creates the principals of a new data directory, and extra
// principals name→role, then starts the server.
func start(t *testing.T, extra map[string]authority.Role) *env {
	t.Helper()
	dir := t.TempDir()
	_, err := authority.Ensure(dir)
	require.NoError(t, err)
	for name, role := range extra {
		_, err := authority.Add(dir, name, role)
		require.NoError(t, err)
	}
	set, err := authority.Ensure(dir)
	require.NoError(t, err)
	authFile := filepath.Join(dir, authority.AuthConfigFile)
	require.NoError(t, set.WriteServerConfig(authFile))
	srv, err := natsrv.Start(natsrv.Config{DataDir: dir, Listen: "127.0.0.1:-1", AuthFile: authFile})
	require.NoError(t, err)
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	opt, err := authority.ConnectOption(set.CredsPath(authority.ServiceName))
	require.NoError(t, err)
	svc, err := nats.Connect("", nats.InProcessServer(srv), opt)
	require.NoError(t, err)
	t.Cleanup(svc.Close)
	js, err := jetstream.New(svc)
	require.NoError(t, err)
	// The live feed on, as Airlock has it while anyone watches.
	require.NoError(t, streams.Provision(context.Background(), js, streams.Config{Live: true}))
	return &env{set: set, srv: srv, svc: svc, js: js}
}

// client is one principal's connection over TCP, with the permission
// violations the server reported to it.
type client struct {
	nc *nats.Conn
	js jetstream.JetStream

	mu         sync.Mutex
	violations []string
}

func (e *env) connect(t *testing.T, name string) *client {
	t.Helper()
	opt, err := authority.ConnectOption(e.set.CredsPath(name))
	require.NoError(t, err)
	c := &client{}
	c.nc, err = nats.Connect(e.srv.ClientURL(), opt, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.violations = append(c.violations, err.Error())
		}
	}))
	require.NoError(t, err)
	t.Cleanup(c.nc.Close)
	c.js, err = jetstream.New(c.nc)
	require.NoError(t, err)
	return c
}

func (c *client) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.violations)
}

// refused publishes to subject and requires the server to report a
// publish permission violation naming it.
func (c *client) refused(t *testing.T, subject string) {
	t.Helper()
	before := c.count()
	require.NoError(t, c.nc.Publish(subject, []byte(`{}`)))
	require.NoError(t, c.nc.Flush())
	require.Eventually(t, func() bool { return c.count() > before }, 5*time.Second, 5*time.Millisecond,
		"publish to %s was not refused", subject)
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Contains(t, c.violations[before], `Publish to "`+subject+`"`)
}

// subRefused subscribes to subject and requires the server to report a
// subscribe permission violation naming it.
func (c *client) subRefused(t *testing.T, subject string) {
	t.Helper()
	before := c.count()
	sub, err := c.nc.SubscribeSync(subject)
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, c.nc.Flush())
	require.Eventually(t, func() bool { return c.count() > before }, 5*time.Second, 5*time.Millisecond,
		"subscription to %s was not refused", subject)
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Contains(t, c.violations[before], `Subscription to "`+subject+`"`)
}

// account is the account the server put c's connection in.
func (e *env) account(t *testing.T, c *client) string {
	t.Helper()
	id, err := c.nc.GetClientID()
	require.NoError(t, err)
	connz, err := e.srv.Connz(&server.ConnzOptions{CID: id, Username: true})
	require.NoError(t, err)
	require.Len(t, connz.Conns, 1)
	return connz.Conns[0].Account
}

// msgs is how many messages stream holds.
func (e *env) msgs(t *testing.T, stream string) uint64 {
	t.Helper()
	st, err := e.js.Stream(context.Background(), stream)
	require.NoError(t, err)
	info, err := st.Info(context.Background())
	require.NoError(t, err)
	return info.State.Msgs
}
