package natsrv_test

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/natsrv"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The standalone config in deploy/ must agree with the embedded server.
func TestDeployConfigMatchesEmbedded(t *testing.T) {
	opts, err := server.ProcessConfigFile("../../deploy/nats-server.conf")
	require.NoError(t, err)
	assert.True(t, opts.JetStream)
	assert.Equal(t, int32(natsrv.MaxPayload), opts.MaxPayload)
	assert.False(t, opts.SyncAlways)

	// One example user of each default principal, with exactly its
	// permissions, and nobody else.
	assert.Empty(t, opts.Users)
	assert.Empty(t, opts.NoAuthUser)
	var defaults []authority.Principal
	set, err := authority.Ensure(t.TempDir())
	require.NoError(t, err)
	for _, p := range set.Principals() {
		p.PublicKey = ""
		defaults = append(defaults, p)
	}
	require.Len(t, opts.Nkeys, len(defaults))
	found := map[string]string{}
	for _, u := range opts.Nkeys {
		require.NotNil(t, u.Permissions, u.Nkey)
		for _, p := range defaults {
			if assert.ObjectsAreEqual(authority.Permissions(p), u.Permissions) {
				assert.NotContains(t, found, p.Name, "two users with the permissions of %s", p.Name)
				found[p.Name] = u.Nkey
			}
		}
	}
	for _, p := range defaults {
		assert.Contains(t, found, p.Name, "no user with the permissions of %s (%s)", p.Name, p.Role)
	}
}

// With users, every client must authenticate, Airlock's own in-process
// connection too, and each gets its role's permissions.
func TestUsersRequireAuthentication(t *testing.T) {
	dir := t.TempDir()
	set, err := authority.Ensure(dir)
	require.NoError(t, err)
	s, err := natsrv.Start(natsrv.Config{DataDir: dir, Listen: "127.0.0.1:0", Users: set.ServerUsers()})
	require.NoError(t, err)
	defer s.Shutdown()

	svcOpt, err := authority.ConnectOption(set.CredsPath(authority.ServiceName))
	require.NoError(t, err)
	svc, err := nats.Connect("", nats.InProcessServer(s), svcOpt)
	require.NoError(t, err)
	defer svc.Close()
	js, err := jetstream.New(svc)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, streams.Provision(ctx, js, streams.Config{}))

	agentOpt, err := authority.ConnectOption(set.CredsPath("agent"))
	require.NoError(t, err)
	agent, err := nats.Connect(s.ClientURL(), agentOpt)
	require.NoError(t, err)
	defer agent.Close()
	ajs, err := jetstream.New(agent)
	require.NoError(t, err)
	ack, err := ajs.Publish(ctx, "airlock.v1.req.ws", []byte(`{}`))
	require.NoError(t, err)
	assert.Equal(t, streams.Requests, ack.Stream)

	_, err = nats.Connect(s.ClientURL())
	assert.ErrorIs(t, err, nats.ErrAuthorization)
	if testing.Short() {
		return
	}
	// Refused in process too. The refusal takes the server's 10s write
	// deadline: the in-process pipe has no buffer, and the client is still
	// writing when the server answers.
	_, err = nats.Connect("", nats.InProcessServer(s))
	assert.Error(t, err)
}

func TestNoUsersNoAuthentication(t *testing.T) {
	s, err := natsrv.Start(natsrv.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	require.NoError(t, err)
	defer s.Shutdown()
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	nc.Close()
}

func TestStartListensAndMonitors(t *testing.T) {
	s, err := natsrv.Start(natsrv.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Monitor: "127.0.0.1:0"})
	require.NoError(t, err)
	defer s.Shutdown()
	assert.NotEmpty(t, s.ClientURL())
	assert.NotNil(t, s.MonitorAddr())
	assert.True(t, s.JetStreamEnabled())

	_, err = natsrv.Start(natsrv.Config{})
	assert.Error(t, err, "DataDir is required")
	_, err = natsrv.Start(natsrv.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:http"})
	assert.Error(t, err)

	// A port in use fails at once, with the address in the error.
	taken := s.Addr().String()
	start := time.Now()
	_, err = natsrv.Start(natsrv.Config{DataDir: t.TempDir(), Listen: taken})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "address already in use")
	assert.Less(t, time.Since(start), 5*time.Second)
}

func TestBadUserKeyRefused(t *testing.T) {
	for _, users := range [][]*server.NkeyUser{{{Nkey: "not-a-key"}}, {nil}} {
		_, err := natsrv.Start(natsrv.Config{DataDir: t.TempDir(), Users: users})
		assert.ErrorContains(t, err, "user 0: not an nkey user public key")
	}
}
