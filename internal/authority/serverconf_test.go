package authority_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The server config, included from a main config as
// deploy/nats-server.conf says, gives an external server the two
// accounts, with each principal in its account with its permissions.
func TestServerConfigIncludedByExternalServer(t *testing.T) {
	data := t.TempDir()
	_, err := authority.Add(data, "approver2", authority.RoleApprover)
	require.NoError(t, err)
	set, err := authority.Ensure(data)
	require.NoError(t, err)
	path := filepath.Join(data, authority.AuthConfigFile)
	require.NoError(t, set.WriteServerConfig(path))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm())
	main := filepath.Join(data, "nats-server.conf")
	require.NoError(t, os.WriteFile(main, []byte("listen: 127.0.0.1:-1\n"+
		"jetstream { store_dir: \""+filepath.Join(data, "js")+"\" }\n"+
		"include \""+authority.AuthConfigFile+"\"\n"), 0o600))

	opts, err := server.ProcessConfigFile(main)
	require.NoError(t, err)
	ps := set.Principals()
	require.Len(t, opts.Nkeys, len(ps))
	byKey := map[string]*server.NkeyUser{}
	for _, u := range opts.Nkeys {
		byKey[u.Nkey] = u
	}
	for _, p := range ps {
		u := byKey[p.PublicKey]
		require.NotNil(t, u, p.Name)
		require.NotNil(t, u.Account, p.Name)
		assert.Equal(t, p.Role.Account(), u.Account.Name, p.Name)
		assert.Equal(t, authority.Permissions(p), u.Permissions, p.Name)
	}
	assert.Empty(t, opts.Users)
	assert.Empty(t, opts.NoAuthUser)
	var accounts []string
	for _, a := range opts.Accounts {
		accounts = append(accounts, a.Name)
	}
	assert.ElementsMatch(t, []string{authority.ServiceAccount, authority.ClientAccount}, accounts)

	// A server run from it enforces them.
	opts.NoSigs = true
	srv, err := server.NewServer(opts)
	require.NoError(t, err)
	srv.Start()
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()
	require.True(t, srv.ReadyForConnections(10*time.Second))
	_, err = nats.Connect(srv.ClientURL())
	assert.ErrorIs(t, err, nats.ErrAuthorization)
	e := &env{set: set, srv: srv}
	svcOpt, err := authority.ConnectOption(set.CredsPath(authority.ServiceName))
	require.NoError(t, err)
	e.svc, err = nats.Connect(srv.ClientURL(), svcOpt)
	require.NoError(t, err)
	defer e.svc.Close()
	e.js, err = jetstream.New(e.svc)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, streams.Provision(ctx, e.js, streams.Config{}))

	ag := e.connect(t, "agent")
	ack, err := ag.js.Publish(ctx, events.RequestSubject("ws", "agent"), []byte(`{}`))
	require.NoError(t, err)
	assert.Equal(t, streams.Requests, ack.Stream)
	ap2 := e.connect(t, "approver2")
	e.respond(t, events.ResolveSubjects, "ok")
	resp, err := ap2.nc.Request(events.ResolveSubject("ws", "approver2"), nil, 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "ok", string(resp.Data))
	ap2.refused(t, events.ResolveSubject("ws", "approver"))
	assert.Equal(t, uint64(1), e.msgs(t, streams.Requests))
}

func TestServerConfigText(t *testing.T) {
	set, err := authority.Ensure(t.TempDir())
	require.NoError(t, err)
	conf := set.ServerConfig()
	for _, want := range []string{
		"accounts {",
		"  AIRLOCK {\n    jetstream: enabled\n",
		`{ service: ">", accounts: [CLIENTS], response_type: stream }`,
		`{ stream: "airlock.v1.reply.>", accounts: [CLIENTS] }`,
		`{ stream: "airlock.v1.live.>", accounts: [CLIENTS] }`,
		`{ service: { account: AIRLOCK, subject: "airlock.v1.req.>" } }`,
		`{ service: { account: AIRLOCK, subject: "$JS.API.DIRECT.GET.AIRLOCK_OPS.>" } }`,
		`{ stream: { account: AIRLOCK, subject: "airlock.v1.reply.>" } }`,
		`{ stream: { account: AIRLOCK, subject: "airlock.v1.live.>" } }`,
		"# agent (agent)\n",
	} {
		assert.Contains(t, conf, want)
	}
	// Nothing else crosses as a stream: not the requests, not what is
	// published on AIRLOCK_OPS's subjects before it is stored.
	assert.Equal(t, 2, strings.Count(conf, "{ stream: \""), "stream exports")
	assert.Equal(t, 2, strings.Count(conf, "{ stream: { account: AIRLOCK,"), "stream imports")
	assert.Equal(t, conf, set.ServerConfig(), "the same every time")
}
