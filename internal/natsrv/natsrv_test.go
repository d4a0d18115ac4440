package natsrv_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/natsrv"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// withAuth creates the principals of dir and writes their server config,
// returning the set and the config's path.
func withAuth(t *testing.T, dir string) (*authority.Set, string) {
	t.Helper()
	set, err := authority.Ensure(dir)
	require.NoError(t, err)
	path := filepath.Join(dir, authority.AuthConfigFile)
	require.NoError(t, set.WriteServerConfig(path))
	return set, path
}

func stop(s *server.Server) {
	s.Shutdown()
	s.WaitForShutdown()
}

// connect connects to s in process as name of set.
func connect(t *testing.T, s *server.Server, set *authority.Set, name string) *nats.Conn {
	t.Helper()
	opt, err := authority.ConnectOption(set.CredsPath(name))
	require.NoError(t, err)
	nc, err := nats.Connect("", nats.InProcessServer(s), opt)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// The standalone config in deploy/ must agree with the embedded server,
// and its accounts with the config Airlock generates.
func TestDeployConfigMatchesGenerated(t *testing.T) {
	opts, err := server.ProcessConfigFile("../../deploy/nats-server.conf")
	require.NoError(t, err)
	assert.True(t, opts.JetStream)
	assert.Equal(t, int32(natsrv.MaxPayload), opts.MaxPayload)
	assert.False(t, opts.SyncAlways)

	// One example user of each default principal, in its account with
	// exactly its permissions, and nobody else.
	assert.Empty(t, opts.Users)
	assert.Empty(t, opts.NoAuthUser)
	dir := t.TempDir()
	set, authFile := withAuth(t, dir)
	defaults := set.Principals()
	require.Len(t, opts.Nkeys, len(defaults))
	found := map[string]string{}
	for _, u := range opts.Nkeys {
		require.NotNil(t, u.Permissions, u.Nkey)
		require.NotNil(t, u.Account, u.Nkey)
		for _, p := range defaults {
			if u.Account.Name == p.Role.Account() && assert.ObjectsAreEqual(authority.Permissions(p), u.Permissions) {
				assert.NotContains(t, found, p.Name, "two users with the permissions of %s", p.Name)
				found[p.Name] = u.Nkey
			}
		}
	}
	for _, p := range defaults {
		assert.Contains(t, found, p.Name, "no user in %s with the permissions of %s (%s)", p.Role.Account(), p.Name, p.Role)
	}

	// Run, both have the same accounts with the same imports, exports
	// and JetStream.
	opts.StoreDir, opts.Port, opts.HTTPPort, opts.NoSigs = t.TempDir(), -1, 0, true
	deployed, err := server.NewServer(opts)
	require.NoError(t, err)
	deployed.Start()
	defer stop(deployed)
	require.True(t, deployed.ReadyForConnections(10*time.Second))
	embedded, err := natsrv.Start(natsrv.Config{DataDir: dir, AuthFile: authFile})
	require.NoError(t, err)
	defer stop(embedded)
	for _, acc := range []string{authority.ServiceAccount, authority.ClientAccount} {
		want, got := accountz(t, embedded, acc), accountz(t, deployed, acc)
		assert.Equal(t, acc == authority.ServiceAccount, want.JetStream, acc)
		assert.Equal(t, want.JetStream, got.JetStream, acc)
		assert.Equal(t, want.Exports, got.Exports, acc)
		assert.Equal(t, want.Imports, got.Imports, acc)
	}
	assert.Len(t, accountz(t, embedded, authority.ServiceAccount).Exports, 3)
	var fromService int
	for _, im := range accountz(t, embedded, authority.ClientAccount).Imports {
		if im.Account == authority.ServiceAccount {
			fromService++
		}
	}
	assert.Equal(t, len(authority.Imports()), fromService)
}

// accountz is the monitoring view of account acc of s, with its imports
// and exports in subject order.
func accountz(t *testing.T, s *server.Server, acc string) *server.AccountInfo {
	t.Helper()
	z, err := s.Accountz(&server.AccountzOptions{Account: acc})
	require.NoError(t, err)
	require.NotNil(t, z.Account, acc)
	info := z.Account
	slices.SortFunc(info.Imports, func(a, b server.ExtImport) int {
		return strings.Compare(string(a.Subject)+" "+string(a.LocalSubject), string(b.Subject)+" "+string(b.LocalSubject))
	})
	slices.SortFunc(info.Exports, func(a, b server.ExtExport) int { return strings.Compare(string(a.Subject), string(b.Subject)) })
	return info
}

// With an auth file, every client must authenticate, Airlock's own
// in-process connection too; the service's JetStream is in its account,
// and the clients reach it through the imports.
func TestAuthFileAccounts(t *testing.T) {
	dir := t.TempDir()
	set, authFile := withAuth(t, dir)
	s, err := natsrv.Start(natsrv.Config{DataDir: dir, Listen: "127.0.0.1:0", AuthFile: authFile})
	require.NoError(t, err)
	defer stop(s)

	svc := connect(t, s, set, authority.ServiceName)
	js, err := jetstream.New(svc)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, streams.Provision(ctx, js, streams.Config{}))
	for name, want := range map[string]bool{authority.ServiceAccount: true, authority.ClientAccount: false} {
		acc, err := s.LookupAccount(name)
		require.NoError(t, err)
		assert.Equal(t, want, acc.JetStreamEnabled(), name)
	}

	agentOpt, err := authority.ConnectOption(set.CredsPath("agent"))
	require.NoError(t, err)
	agent, err := nats.Connect(s.ClientURL(), agentOpt)
	require.NoError(t, err)
	defer agent.Close()
	ajs, err := jetstream.New(agent)
	require.NoError(t, err)
	ack, err := ajs.Publish(ctx, events.RequestSubject("ws", "agent"), []byte(`{}`))
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

func TestNoAuthFileNoAuthentication(t *testing.T) {
	s, err := natsrv.Start(natsrv.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	require.NoError(t, err)
	defer stop(s)
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	nc.Close()
}

func TestStartListensAndMonitors(t *testing.T) {
	s, err := natsrv.Start(natsrv.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Monitor: "127.0.0.1:0"})
	require.NoError(t, err)
	defer stop(s)
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

func TestBadAuthFileRefused(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, conf, want string
	}{
		{name: "missing", want: "no such file"},
		{name: "bad key", conf: "accounts { A { users: [ { nkey: not-a-key } ] } }", want: "Not a valid public nkey for a user"},
		{name: "no accounts", conf: "authorization { users: [ { nkey: UAMWO5XUZHWGYLJRAQIZVTQ7ETZZUJ6UQOMNY2HX3IWDTAYFKM5AP5HS } ] }", want: "no accounts or no users"},
		{name: "no users", conf: "accounts { A { jetstream: enabled } }", want: "no accounts or no users"},
		{name: "syntax", conf: "accounts {", want: "auth file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".conf")
			if tc.conf != "" {
				require.NoError(t, os.WriteFile(path, []byte(tc.conf), 0o600))
			}
			_, err := natsrv.Start(natsrv.Config{DataDir: t.TempDir(), AuthFile: path})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// Streams written without accounts live in the global account's store,
// and the other way round: a server would start with empty streams, so
// Start refuses, and the streams are there once their directory is moved.
func TestStoreOfOtherAccountRefused(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := natsrv.Start(natsrv.Config{DataDir: dir})
	require.NoError(t, err)
	nc, err := nats.Connect("", nats.InProcessServer(s))
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	require.NoError(t, streams.Provision(ctx, js, streams.Config{}))
	_, err = js.Publish(ctx, events.RequestSubject("ws", "agent"), []byte(`{"old":1}`))
	require.NoError(t, err)
	nc.Close()
	stop(s)

	set, authFile := withAuth(t, dir)
	_, err = natsrv.Start(natsrv.Config{DataDir: dir, AuthFile: authFile})
	require.Error(t, err)
	store := filepath.Join(dir, "jetstream", "jetstream")
	assert.Contains(t, err.Error(), filepath.Join(store, "$G")+" holds the streams of account $G")

	require.NoError(t, os.Rename(filepath.Join(store, "$G"), filepath.Join(store, authority.ServiceAccount)))
	s, err = natsrv.Start(natsrv.Config{DataDir: dir, AuthFile: authFile})
	require.NoError(t, err)
	js, err = jetstream.New(connect(t, s, set, authority.ServiceName))
	require.NoError(t, err)
	st, err := js.Stream(ctx, streams.Requests)
	require.NoError(t, err)
	raw, err := st.GetMsg(ctx, 1)
	require.NoError(t, err)
	assert.Equal(t, `{"old":1}`, string(raw.Data))
	stop(s)

	_, err = natsrv.Start(natsrv.Config{DataDir: dir})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "holds the streams of account "+authority.ServiceAccount)
}
