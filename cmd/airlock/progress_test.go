package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/term"
)

// smallLog writes a data dir holding a sound audit log of n leaves and
// its key, as the projector would have left it.
func smallLog(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	key, _, err := audit.LoadOrCreateKey(dir)
	require.NoError(t, err)
	st, err := store.Open(filepath.Join(dir, app.StoreDir))
	require.NoError(t, err)
	defer st.Close()
	at := time.Now()
	b := st.NewBatch()
	for i := range n {
		op := fmt.Sprintf("op_%032x", i/4)
		d := &events.Completed{OpHeader: events.OpHeader{OpID: op, Workspace: "w1"}, Attempt: "a1", ResultDigest: events.Digest([]byte(op))}
		l := audit.NewLeaf("AIRLOCK_OPS", events.OpEventSubject("w1", op, "echo", events.TypeCompleted), uint64(i+1), at,
			events.TypeCompleted, op, "airlock/executor", at.Format(time.RFC3339Nano), []byte(op), d)
		require.NoError(t, b.AppendLeaf(l.Encode(), l.Op))
	}
	b.SetApplied(uint64(n))
	_, err = b.Checkpoint(key)
	require.NoError(t, err)
	require.NoError(t, b.Commit(true))
	return dir
}

// Piped, `audit verify` writes its report on stdout and not one byte on
// stderr, with or without --json: no bar, no carriage return.
func TestProgressQuietWhenPiped(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	dir := smallLog(t, 3000)
	for _, tc := range []struct {
		name string
		args []string
		want string // on stdout
	}{
		{name: "text", args: nil, want: "status:      OK\n"},
		{name: "json", args: []string{"--json"}, want: `"status":"OK"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := run(t, append([]string{"audit", "verify", "--data", dir}, tc.args...)...)
			require.Equal(t, 0, code, "%s %s", out, errOut)
			assert.Contains(t, out, tc.want)
			assert.Contains(t, out, "3000")
			assert.NotContains(t, out, "\r")
			assert.Empty(t, errOut)
		})
	}
}

// On a terminal `audit verify` draws its bar on stderr and ends it with
// a newline; stdout (a pipe) gets the same report as ever. --json and
// TERM=dumb draw nothing even there.
func TestProgressOnTerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	dir := smallLog(t, 3000)
	verify := []string{"audit", "verify", "--data", dir}
	out, tty, code := runOnTerminal(t, []string{"TERM=xterm"}, verify...)
	require.Equal(t, 0, code, "%s %s", out, tty)
	assert.Contains(t, out, "status:      OK\n")
	assert.NotContains(t, out, "\r")
	assert.True(t, strings.HasPrefix(tty, "\rverify [>                       ]    0/3000   0%  -/s  ETA --"), "%q", tty)
	final := tty[strings.LastIndex(tty, "\r")+1:]
	assert.Regexp(t, `^verify \[={24}\] 3000/3000 100%  \S+/s  in \d+\.\ds *\n$`, final)

	for _, tc := range []struct {
		name string
		env  string
		args []string
	}{
		{name: "json", env: "TERM=xterm", args: []string{"--json"}},
		{name: "dumb terminal", env: "TERM=dumb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, tty, code := runOnTerminal(t, []string{tc.env}, append(verify, tc.args...)...)
			require.Equal(t, 0, code, "%s %s", out, tty)
			assert.Contains(t, out, "OK")
			assert.Empty(t, tty)
		})
	}
}

// `airlock bench` draws a bar per phase on a terminal, one under the
// other, and only its banner when piped.
func TestProgressBench(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	args := []string{"bench", "--ops", "40", "--concurrency", "4", "--holds", "-1", "--execs", "-1", "--audit-leaves", "-1"}
	out, errOut, code := run(t, args...)
	require.Equal(t, 0, code, "%s %s", out, errOut)
	assert.Regexp(t, `^bench: 40 echo ops, 4 in flight, GOGC=-?\d+, 2000 warm-up ops first \.\.\.\n$`, errOut)
	assert.Contains(t, out, "(40/40 completed)")

	out, tty, code := runOnTerminal(t, []string{"TERM=xterm"}, args...)
	require.Equal(t, 0, code, "%s %s", out, tty)
	assert.Contains(t, out, "(40/40 completed)")
	assert.NotContains(t, out, "\r")
	var finals []string
	for _, line := range strings.SplitAfter(tty, "\n") {
		if i := strings.LastIndex(line, "\r"); i >= 0 {
			finals = append(finals, line[i+1:])
		}
	}
	require.Len(t, finals, 8, "%q", tty)
	assert.Regexp(t, `^pipeline +\[={24}\] 40/40 100%  \S+/s  in \S+ *\n$`, finals[0])
	assert.Regexp(t, `^paced +\[={24}\] 40/40 100%  \S+/s  in \S+ *\n$`, finals[1])
	assert.Regexp(t, `^16 in flight +\[={24}\] 40/40 100%  \S+/s  in \S+ *\n$`, finals[2])
	assert.Regexp(t, `^result fetch +\[={24}\] 40/40 100%  \S+/s  in \S+ *\n$`, finals[3])
	assert.Regexp(t, `^raw publish +\[={24}\] 160/160 100%  \S+/s  in \S+ *\n$`, finals[4])
	assert.Regexp(t, `^raw, paced +\[={24}\] 40/40 100%  \S+/s  in \S+ *\n$`, finals[5])
	assert.Regexp(t, `^NATS skeleton +\[={24}\] 40/40 100%  \S+/s  in \S+ *\n$`, finals[6])
	assert.Regexp(t, `^no results kept +\[={24}\] 40/40 100%  \S+/s  in \S+ *\n$`, finals[7])
	// The bars line up.
	for _, f := range finals {
		assert.Equal(t, strings.Index(finals[0], "["), strings.Index(f, "["), f)
	}
}

// `airlock replay` draws the messages applied against the stream's on a
// terminal and nothing on a pipe.
func TestProgressReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	dir := t.TempDir()
	srv := startServer(t, dir, freePort(t), nil)
	submitEcho(t, srv, "w1", 3)

	out, errOut, code := srv.run(t, "replay", "--into", filepath.Join(t.TempDir(), "piped"))
	require.Equal(t, 0, code, "%s %s", out, errOut)
	var n int
	_, err := fmt.Sscanf(out, "replayed %d events", &n)
	require.NoError(t, err, out)
	require.GreaterOrEqual(t, n, 6, "2 events an op: started (with the decision), completed")
	assert.Empty(t, errOut)

	out, tty, code := runOnTerminal(t, []string{"TERM=xterm"}, "replay", "--into", filepath.Join(t.TempDir(), "tty"),
		"--server="+srv.url, "--data="+dir)
	require.Equal(t, 0, code, "%s %s", out, tty)
	assert.Contains(t, out, fmt.Sprintf("replayed %d events", n))
	assert.NotContains(t, out, "\r")
	final := tty[strings.LastIndex(tty, "\r")+1:]
	assert.Regexp(t, fmt.Sprintf(`^replay \[={24}\] %d/%d 100%%  \S+/s  in \S+ *\n$`, n, n), final)
}

// runOnTerminal runs the binary with stderr on a pseudo-terminal (in raw
// mode: what the program writes is what arrives) and stdout on a pipe.
func runOnTerminal(t *testing.T, env []string, args ...string) (stdout, tty string, code int) {
	t.Helper()
	master, slave := openPTY(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, slave
	require.NoError(t, cmd.Start())
	slave.Close() // the child holds it now: reads end when it exits
	read := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(master) // ends in EIO once no one holds the slave
		read <- string(b)
	}()
	err := cmd.Wait()
	tty = <-read
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), tty, ee.ExitCode()
	}
	require.NoError(t, err)
	return out.String(), tty, 0
}

// openPTY opens a pseudo-terminal pair with the ioctls of Linux's generic
// ABI (no module offers them here); elsewhere the test is skipped.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	const tiocsptlck, tiocgptn = 0x40045431, 0x80045430
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Skipf("no pseudo-terminal helper for %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), tiocsptlck, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Skipf("unlock pseudo-terminal: %v", e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), tiocgptn, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Skipf("pseudo-terminal number: %v", e)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { slave.Close() })
	_, err = term.MakeRaw(int(slave.Fd()))
	require.NoError(t, err)
	return master, slave
}
