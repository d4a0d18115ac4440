package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/ledger"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// natsServerBinary is a nats-server binary built from the nats-server
// module this one requires (no other network than the module proxy),
// once per test run. TestMain starts the build in the background.
var natsServerBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "airlock-nats-server-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "nats-server")
	build := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2")
	out, err := build.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build nats-server: %v: %s", err, out)
	}
	return bin, nil
})

// natsNode is one nats-server process of a test cluster, started from
// deploy/cluster/nats-<n>.conf with its addresses rewritten to loopback.
type natsNode struct {
	name  string // nats-1, nats-2, nats-3: the config's server_name
	conf  string
	url   string
	http  string
	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{}
	log   *testenv.Buffer
	kills int
}

// natsCluster is the three nodes of deploy/cluster, on loopback.
type natsCluster struct {
	t     testing.TB
	nodes []*natsNode
}

// rewrite replaces old by new in s exactly once, or fails: a node file
// that no longer says what the test rewrites is a test to update.
func rewrite(t testing.TB, s, old, new string) string {
	t.Helper()
	require.Equal(t, 1, strings.Count(s, old), "deploy/cluster: %q should appear once", old)
	return strings.Replace(s, old, new, 1)
}

// freePortN returns a loopback port nothing listened on a moment ago.
func freePortN(t testing.TB) int {
	t.Helper()
	addr := freePort(t)
	_, p, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	n, err := strconv.Atoi(p)
	require.NoError(t, err)
	return n
}

// startCluster starts deploy/cluster's three nodes as nats-server
// processes, with the accounts of set in place of the example ones, and
// waits for JetStream to answer.
func startCluster(t testing.TB, set *authority.Set) *natsCluster {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, set.WriteServerConfig(filepath.Join(dir, "accounts.conf")))
	// The ports are picked before the nodes bind them, and another test's
	// process may take one meanwhile: a cluster that loses a port that
	// way is started again on new ones.
	for try := 1; ; try++ {
		c, busy := tryCluster(t, dir, try)
		if c != nil {
			t.Cleanup(func() {
				for _, n := range c.nodes {
					n.kill()
				}
			})
			c.waitJetStream(t, set)
			return c
		}
		if try == 3 {
			t.Fatalf("three clusters in a row lost a port to another process: %s", busy)
		}
	}
}

// tryCluster writes the three nodes' configs under dir (for try) and
// starts them; it returns nil and the log of a node that found its port
// taken, after killing the others.
func tryCluster(t testing.TB, dir string, try int) (*natsCluster, string) {
	t.Helper()
	clusterPorts := []int{freePortN(t), freePortN(t), freePortN(t)}
	c := &natsCluster{t: t}
	for i := 1; i <= 3; i++ {
		src, err := os.ReadFile(filepath.Join("..", "..", "deploy", "cluster", fmt.Sprintf("nats-%d.conf", i)))
		require.NoError(t, err)
		client, mon := freePortN(t), freePortN(t)
		conf := string(src)
		conf = rewrite(t, conf, "listen: 0.0.0.0:4222", fmt.Sprintf("listen: 127.0.0.1:%d", client))
		conf = rewrite(t, conf, "http: 127.0.0.1:8222", fmt.Sprintf("http: 127.0.0.1:%d", mon))
		conf = rewrite(t, conf, `store_dir: "/var/lib/nats"`, fmt.Sprintf("store_dir: %q", filepath.Join(dir, fmt.Sprintf("store-%d-%d", i, try))))
		conf = rewrite(t, conf, "listen: 0.0.0.0:6222", fmt.Sprintf("listen: 127.0.0.1:%d", clusterPorts[i-1]))
		for j := 1; j <= 3; j++ {
			conf = rewrite(t, conf, fmt.Sprintf("@nats-%d:6222", j), fmt.Sprintf("@127.0.0.1:%d", clusterPorts[j-1]))
		}
		path := filepath.Join(dir, fmt.Sprintf("nats-%d-%d.conf", i, try))
		require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
		n := &natsNode{
			name: fmt.Sprintf("nats-%d", i), conf: path,
			url: fmt.Sprintf("nats://127.0.0.1:%d", client), http: fmt.Sprintf("http://127.0.0.1:%d", mon),
		}
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		if log, ok := n.startOrBusy(t); !ok {
			for _, m := range c.nodes {
				m.kill()
			}
			return nil, log
		}
	}
	return c, ""
}

// startOrBusy is start, except that a node that exits because its port is
// taken is reported (false, its log) rather than failing the test.
func (n *natsNode) startOrBusy(t testing.TB) (string, bool) {
	t.Helper()
	var busy string
	n.startWith(t, func(log string) bool {
		if strings.Contains(log, "address already in use") {
			busy = log
			return true
		}
		return false
	})
	return busy, busy == ""
}

// start runs the node and waits until it accepts connections.
func (n *natsNode) start(t testing.TB) {
	t.Helper()
	n.startWith(t, nil)
}

// startWith is start; a node that exits first is a test failure unless
// exited, given its log, says it is handled.
func (n *natsNode) startWith(t testing.TB, exited func(log string) bool) {
	t.Helper()
	bin, err := natsServerBinary()
	require.NoError(t, err)
	n.mu.Lock()
	defer n.mu.Unlock()
	cmd := exec.Command(bin, "-c", n.conf)
	n.log = &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = n.log, n.log
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	n.cmd, n.done = cmd, done
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(n.http + "/healthz?js-server-only=true")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-done:
			if exited != nil && exited(n.log.String()) {
				n.cmd = nil
				return
			}
			t.Fatalf("%s exited: %s", n.name, n.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not come up: %s", n.name, n.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill ends the node with SIGKILL and waits for it; a node already down
// is left so.
func (n *natsNode) kill() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.done
	n.cmd = nil
	n.kills++
}

// urls is the client URL list of every node, as --nats-url takes it.
func (c *natsCluster) urls() string {
	var us []string
	for _, n := range c.nodes {
		us = append(us, n.url)
	}
	return strings.Join(us, ",")
}

// node returns the node whose server_name is name.
func (c *natsCluster) node(name string) *natsNode {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// waitJetStream waits until the cluster has a JetStream meta leader.
func (c *natsCluster) waitJetStream(t testing.TB, set *authority.Set) {
	t.Helper()
	js := c.jetStream(t, set)
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err == nil
	}, time.Minute, 100*time.Millisecond, "no JetStream meta leader")
}

// jetStream connects to the cluster as Airlock's own principal.
func (c *natsCluster) jetStream(t testing.TB, set *authority.Set) jetstream.JetStream {
	t.Helper()
	opt, err := authority.ConnectOption(set.CredsPath(authority.ServiceName))
	require.NoError(t, err)
	nc, err := nats.Connect(c.urls(), opt, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// leader names the node that leads stream now; "" when it cannot be told.
func leader(js jetstream.JetStream, stream string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return ""
	}
	info, err := st.Info(ctx)
	if err != nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}

// clusterData makes n data dirs for Airlock processes of one deployment:
// the first holds the principals and the audit key, as its first start
// makes them, the others a copy of its creds/ directory and audit key, as
// deploy/README.md says.
func clusterData(t testing.TB, n int) ([]string, *authority.Set) {
	t.Helper()
	dirs := []string{t.TempDir()}
	set, err := authority.Ensure(dirs[0])
	require.NoError(t, err)
	_, _, err = audit.LoadOrCreateKey(dirs[0])
	require.NoError(t, err)
	for range n - 1 {
		d := t.TempDir()
		copyCreds(t, dirs[0], d)
		dirs = append(dirs, d)
	}
	return dirs, set
}

// copyCreds copies from's creds/ directory and audit key into to, with
// their modes.
func copyCreds(t testing.TB, from, to string) {
	t.Helper()
	for _, f := range []string{audit.KeyFile, audit.PubFile} {
		b, err := os.ReadFile(filepath.Join(from, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(to, f), b, 0o600))
	}
	creds := filepath.Join(to, authority.CredsDir)
	require.NoError(t, os.CopyFS(creds, os.DirFS(filepath.Join(from, authority.CredsDir))))
	require.NoError(t, filepath.WalkDir(creds, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Chmod(path, 0o700)
		}
		return os.Chmod(path, 0o600)
	}))
}

// launchServe starts `airlock serve` with args on dir and waits until it
// says where it is connected. It returns an error, and no process, when
// serve exits first or takes longer than a minute.
func launchServe(dir string, env []string, args ...string) (*server, error) {
	cmd := exec.Command(binary, append([]string{"serve", "--data", dir, "--monitor", "", "--log-level", "warn"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, dir: dir, done: make(chan struct{}), stderr: &testenv.Buffer{}}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	urls := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		var natsURL, metrics string
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 2 && f[0] == "nats:":
				natsURL = f[1]
			case len(f) >= 2 && f[0] == "metrics:":
				metrics = f[1]
			case len(f) == 2 && f[0] == "data:":
				// Printed after nats: and metrics:.
				urls <- [2]string{natsURL, metrics}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	select {
	case u := <-urls:
		s.url, s.metrics = u[0], u[1]
		return s, nil
	case <-s.done:
		return nil, fmt.Errorf("airlock serve exited with %d: %s", cmd.ProcessState.ExitCode(), s.stderr.String())
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-s.done
		return nil, fmt.Errorf("airlock serve did not start in a minute: %s", s.stderr.String())
	}
}

// ledgerLeft lists the ops with ledger records left in a data dir: the
// exec ledger's journal as on disk, the patch ledger's per-op entries.
func ledgerLeft(t testing.TB, dir string) []string {
	t.Helper()
	var left []string
	ops, err := ledger.ReadKept(filepath.Join(dir, "ledger", "exec"))
	require.NoError(t, err)
	for _, op := range ops {
		left = append(left, "exec/"+op)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "ledger", "patch"))
	if !os.IsNotExist(err) {
		require.NoError(t, err)
		for _, e := range entries {
			left = append(left, "patch/"+e.Name())
		}
	}
	return left
}

// opsStreamLast is AIRLOCK_OPS's last sequence, as its leader says.
func opsStreamLast(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	st, err := js.Stream(ctx, streams.Ops)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.LastSeq, nil
}
