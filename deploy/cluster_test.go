package deploy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/natsrv"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/airlock-dev/airlock/producers"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite cluster/accounts.conf from the accounts block of nats-server.conf")

// nodeFile is node i's configuration file.
func nodeFile(i int) string { return fmt.Sprintf("cluster/nats-%d.conf", i) }

func TestClusterAccountsMatchSingleNode(t *testing.T) {
	single, err := os.ReadFile(singleNodeFile)
	require.NoError(t, err)
	i := strings.Index(string(single), "\naccounts {\n")
	require.Positive(t, i, "no accounts block in %s", singleNodeFile)
	block := string(single[i+1:])

	have, err := os.ReadFile(accountsFile)
	require.NoError(t, err)
	j := strings.Index(string(have), "\naccounts {\n")
	require.Positive(t, j, "no accounts block in %s", accountsFile)
	header := string(have[:j+1])
	if *update {
		require.NoError(t, os.WriteFile(accountsFile, []byte(header+block), 0o644))
		return
	}
	assert.Equal(t, block, string(have[j+1:]), "%s differs from the accounts block of %s (go test -run TestClusterAccountsMatchSingleNode -update ./deploy/)", accountsFile, singleNodeFile)
	for _, line := range strings.Split(strings.TrimSuffix(header, "\n"), "\n") {
		assert.True(t, line == "" || strings.HasPrefix(line, "#"), "%s: only comments before the block: %q", accountsFile, line)
	}
}

func TestClusterConfigs(t *testing.T) {
	single, err := server.ProcessConfigFile(singleNodeFile)
	require.NoError(t, err)
	users := func(o *server.Options) map[string]string {
		out := map[string]string{}
		for _, u := range o.Nkeys {
			require.NotNil(t, u.Account, u.Nkey)
			perms, err := json.Marshal(u.Permissions)
			require.NoError(t, err)
			out[u.Nkey] = u.Account.Name + " " + string(perms)
		}
		return out
	}
	accounts := func(o *server.Options) []string {
		var out []string
		for _, a := range o.Accounts {
			out = append(out, a.Name)
		}
		slices.Sort(out)
		return out
	}
	require.Len(t, accounts(single), 2)

	var routes []string
	names := map[string]bool{}
	for i := 1; i <= 3; i++ {
		name := nodeFile(i)
		o, err := server.ProcessConfigFile(name)
		require.NoError(t, err, name)
		assert.Equal(t, fmt.Sprintf("nats-%d", i), o.ServerName, name)
		names[o.ServerName] = true

		// The same accounts, principals and permissions as the single node.
		assert.Equal(t, accounts(single), accounts(o), name)
		assert.Equal(t, users(single), users(o), name)
		assert.Empty(t, o.Users, name)
		assert.Empty(t, o.NoAuthUser, name)

		// JetStream with a store and a bound, Airlock's payload limit.
		assert.True(t, o.JetStream, name)
		assert.NotEmpty(t, o.StoreDir, name)
		assert.Positive(t, o.JetStreamMaxStore, name)
		assert.Equal(t, int32(natsrv.MaxPayload), o.MaxPayload, name)
		assert.False(t, o.SyncAlways, name)
		assert.Equal(t, "127.0.0.1", o.HTTPHost, "%s: monitoring has no authentication", name)

		// One cluster, three routes that authenticate, the same on every node.
		assert.Equal(t, "airlock", o.Cluster.Name, name)
		assert.NotEmpty(t, o.Cluster.Username, name)
		assert.NotEmpty(t, o.Cluster.Password, name)
		require.Len(t, o.Routes, 3, name)
		var rs []string
		hosts := map[string]bool{}
		for _, r := range o.Routes {
			assert.Equal(t, "nats-route", r.Scheme, name)
			assert.Equal(t, strconv.Itoa(o.Cluster.Port), r.Port(), name)
			assert.Equal(t, o.Cluster.Username, r.User.Username(), name)
			pw, _ := r.User.Password()
			assert.Equal(t, o.Cluster.Password, pw, name)
			hosts[r.Hostname()] = true
			rs = append(rs, r.String())
		}
		assert.Equal(t, map[string]bool{"nats-1": true, "nats-2": true, "nats-3": true}, hosts, name)
		slices.Sort(rs)
		if routes == nil {
			routes = rs
		}
		assert.Equal(t, routes, rs, "%s routes differ from nats-1's", name)
	}
	assert.Len(t, names, 3)

	// The node files differ in the node's number only.
	number := regexp.MustCompile(`(?m)^(# Node |server_name: nats-)\d`)
	file := regexp.MustCompile(`nats-\d\.conf`)
	var first string
	for i := 1; i <= 3; i++ {
		b, err := os.ReadFile(nodeFile(i))
		require.NoError(t, err)
		n := number.ReplaceAllString(string(b), "${1}N")
		n = file.ReplaceAllString(n, "nats-N.conf")
		if i == 1 {
			first = n
			continue
		}
		assert.Equal(t, first, n, "%s differs from %s in more than the node's number", nodeFile(i), nodeFile(1))
	}
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
		require.NoError(t, l.Close())
	}
	return ports
}

// startNodes starts the three node files of conf on loopback: clients on
// random ports, routes on free ports in place of nats-1..3:6222, stores
// in temporary directories. It returns the client URLs, or nil, with
// every node stopped again, when one did not come up (a port taken in the
// meantime); the servers stop at the end of the test.
func startNodes(t *testing.T, conf string) []string {
	t.Helper()
	clusterPorts := freePorts(t, 3)
	var urls []string
	var started []*server.Server
	stop := func() {
		for _, s := range started {
			s.Shutdown()
			s.WaitForShutdown()
		}
	}
	for i := 1; i <= 3; i++ {
		o, err := server.ProcessConfigFile(filepath.Join(conf, filepath.Base(nodeFile(i))))
		require.NoError(t, err)
		o.Host, o.Port = "127.0.0.1", -1
		o.HTTPHost, o.HTTPPort = "", 0
		o.Cluster.Host, o.Cluster.Port = "127.0.0.1", clusterPorts[i-1]
		for _, r := range o.Routes {
			var n int
			_, err := fmt.Sscanf(r.Hostname(), "nats-%d", &n)
			require.NoError(t, err, r.Hostname())
			r.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(clusterPorts[n-1]))
		}
		o.StoreDir = t.TempDir()
		o.NoSigs, o.NoLog = true, true
		s, err := server.NewServer(o)
		require.NoError(t, err)
		s.Start()
		started = append(started, s)
		if !s.ReadyForConnections(10 * time.Second) {
			t.Logf("%s did not come up on cluster port %d", o.ServerName, clusterPorts[i-1])
			stop()
			return nil
		}
		urls = append(urls, s.ClientURL())
	}
	t.Cleanup(stop)
	return urls
}

// The cluster's three node files, with the accounts Airlock generates in
// place of the example ones, form a JetStream cluster that runs Airlock
// as `airlock serve --nats-url URL,URL,URL --replicas 3`: its
// streams and audit bucket get three replicas, and an agent on one node
// submits a call that runs. The nodes listen on loopback with free ports
// instead of their configured addresses.
func TestClusterRunsAirlock(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node JetStream cluster")
	}
	data := t.TempDir()
	set, err := authority.Ensure(data)
	require.NoError(t, err)
	conf := t.TempDir()
	require.NoError(t, set.WriteServerConfig(filepath.Join(conf, "accounts.conf")))
	for i := 1; i <= 3; i++ {
		b, err := os.ReadFile(nodeFile(i))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(conf, filepath.Base(nodeFile(i))), b, 0o644))
	}
	var urls []string
	for try := 0; try < 3 && urls == nil; try++ {
		urls = startNodes(t, conf)
	}
	require.Len(t, urls, 3, "the nodes did not come up")

	// JetStream answers once the nodes have elected a meta leader.
	svcOpt, err := authority.ConnectOption(set.CredsPath(authority.ServiceName))
	require.NoError(t, err)
	nc, err := nats.Connect(strings.Join(urls, ","), svcOpt)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A server without a leader leaves API requests unanswered: ask with
	// a short deadline, again and again.
	require.Eventually(t, func() bool {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := js.AccountInfo(actx)
		return err == nil
	}, time.Minute, 100*time.Millisecond, "no JetStream meta leader")

	// airlock serve, the binary, on the cluster.
	bin := filepath.Join(t.TempDir(), "airlock")
	build := exec.Command("go", "build", "-o", bin, "../cmd/airlock")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	serve := exec.CommandContext(ctx, bin, "serve", "--data", data, "--nats-url", strings.Join(urls, ","), "--replicas", "3", "--monitor", "")
	stdout, err := serve.StdoutPipe()
	require.NoError(t, err)
	stderr := &testenv.Buffer{}
	serve.Stderr = stderr
	require.NoError(t, serve.Start())
	t.Cleanup(func() {
		_ = serve.Process.Signal(os.Interrupt)
		_ = serve.Wait()
		if t.Failed() {
			t.Logf("airlock serve's log:\n%s", stderr.String())
		}
	})
	serving := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		ok := false
		for sc.Scan() {
			if !ok && sc.Text() == "airlock serving" {
				ok = true
				serving <- true
			}
		}
		if !ok {
			serving <- false
		}
	}()
	select {
	case ok := <-serving:
		require.True(t, ok, "airlock serve exited before it served: %s", stderr.String())
	case <-ctx.Done():
		t.Fatalf("airlock serve did not serve: %s", stderr.String())
	}
	for _, name := range []string{streams.Requests, streams.Ops, "KV_" + streams.AuditBucket} {
		st, err := js.Stream(ctx, name)
		require.NoError(t, err, name)
		info, err := st.Info(ctx)
		require.NoError(t, err, name)
		assert.Equal(t, 3, info.Config.Replicas, name)
		if assert.NotNil(t, info.Cluster, name) {
			assert.Equal(t, "airlock", info.Cluster.Name, name)
			assert.Len(t, info.Cluster.Replicas, 2, name)
		}
	}

	// An agent connected to another node than the first submits a call.
	agentOpt, err := authority.ConnectOption(set.CredsPath("agent"))
	require.NoError(t, err)
	anc, err := nats.Connect(urls[2], agentOpt)
	require.NoError(t, err)
	defer anc.Close()
	c, err := producers.New(anc)
	require.NoError(t, err)
	defer c.Close()
	res, err := c.Submit(ctx, events.Request{Workspace: "cluster", Agent: "agent", Tool: "echo", Args: json.RawMessage(`{"n":3}`)})
	require.NoError(t, err)
	assert.Equal(t, events.StateCompleted, res.State)
	assert.JSONEq(t, `{"n":3}`, string(res.Result))
}
