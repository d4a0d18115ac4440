package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// binary is the airlock binary built for this test run, with the
// airlocktest tag (it registers the counting executor).
var binary string

// toolServer is the example remote tool server, built for this test run.
var toolServer string

// mcpExample is the example upstream MCP server, built for this test run.
var mcpExample string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "airlock-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	flag.Parse()
	binary = filepath.Join(dir, "airlock")
	build := exec.Command("go", "build", "-race", "-tags", "airlocktest", "-o", binary, ".")
	if flag.Lookup("test.bench").Value.String() != "" {
		// Benchmarks measure the build users run: no race detector, no
		// test executors.
		build = exec.Command("go", "build", "-o", binary, ".")
	}
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if p := os.Getenv("AIRLOCK_TEST_BINARY"); p != "" {
		// Another build (an earlier commit's) under the same tests.
		binary, build = p, exec.Command("true")
	}
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build airlock:", err)
		os.Exit(1)
	}
	toolServer = filepath.Join(dir, "airlock-tool-example")
	build = exec.Command("go", "build", "-o", toolServer, "../airlock-tool-example")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build airlock-tool-example:", err)
		os.Exit(1)
	}
	mcpExample = filepath.Join(dir, "airlock-mcp-example")
	build = exec.Command("go", "build", "-o", mcpExample, "../airlock-mcp-example")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build airlock-mcp-example:", err)
		os.Exit(1)
	}
	if run := flag.Lookup("test.run").Value.String(); !testing.Short() && (run == "" || matches(run, "TestNATSCLI")) {
		go func() { _, _ = natsCLI() }() // built while the other tests run
	}
	if run := flag.Lookup("test.run").Value.String(); !testing.Short() && (run == "" || matches(run, "TestCluster")) {
		go func() { _, _ = natsServerBinary() }()
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// matches reports whether the -run pattern selects the test named.
func matches(pattern, test string) bool {
	re, err := regexp.Compile(strings.Split(pattern, "/")[0])
	return err == nil && re.MatchString(test)
}

// freePort returns a loopback address with a port nothing listens on.
func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// server is one `airlock serve` subprocess.
type server struct {
	cmd *exec.Cmd
	dir string
	url string
	// metrics is its /metrics URL, when it serves one (launchServe).
	metrics string
	done    chan struct{}
	stderr  *testenv.Buffer
}

// startServer runs airlock serve on dir and addr and waits until it says
// where it listens.
func startServer(t testing.TB, dir, addr string, env []string, args ...string) *server {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"serve", "--data", dir, "--listen", addr, "--monitor", "", "--log-level", "warn"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	s := &server{cmd: cmd, dir: dir, done: make(chan struct{}), stderr: &testenv.Buffer{}}
	cmd.Stderr = s.stderr
	require.NoError(t, cmd.Start())
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "nats:" {
				urls <- f[1]
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	select {
	case s.url = <-urls:
	case <-s.done:
		t.Fatalf("airlock serve exited early: %s", s.stderr.String())
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("airlock serve did not start: %s", s.stderr.String())
	}
	t.Cleanup(func() { s.kill() })
	return s
}

// kill ends the process with SIGKILL: no shutdown code runs.
func (s *server) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

// stop ends the process with SIGTERM and returns its exit code.
func (s *server) stop(ctx context.Context) (int, error) {
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return -1, err
	}
	select {
	case <-s.done:
		return s.cmd.ProcessState.ExitCode(), nil
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

// run runs a client command against the server, with its data dir, so
// the command finds its role's credentials there.
func (s *server) run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return run(t, append(args, "--server="+s.url, "--data="+s.dir)...)
}

// connect connects to the server as the principal named (its creds file
// in the server's data dir).
func (s *server) connect(t *testing.T, name string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	opt, err := authority.ConnectOption(filepath.Join(s.dir, authority.CredsDir, name+authority.CredsExt))
	require.NoError(t, err)
	nc, err := nats.Connect(s.url, append(opts, opt)...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

func projectorQuery(state string) events.ListQuery {
	return events.ListQuery{State: state, Limit: 1000}
}
