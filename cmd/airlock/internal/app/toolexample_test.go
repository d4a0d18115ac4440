package app_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/apptest"
	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/consumers/tools/remote"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/airlock-dev/airlock/producers"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The example tool server, the binary, behind a whole Airlock: an agent's
// op appends once, and submitting it again gets the same outcome.
func TestExampleToolServerThroughAirlock(t *testing.T) {
	const subject = "tools.append"
	n := testenv.StartNATS(t, streams.Config{})
	dir := t.TempDir()
	bin := filepath.Join(dir, "airlock-tool-example")
	out, err := exec.Command("go", "build", "-o", bin, "../../../airlock-tool-example").CombinedOutput()
	require.NoError(t, err, "%s", out)
	lines := filepath.Join(dir, "out.log")
	tool := exec.Command(bin, "--server", n.Server.ClientURL(), "--subject", subject, "--state", filepath.Join(dir, "state.json"), "--out", lines)
	stderr := &testenv.Buffer{}
	tool.Stderr = stderr
	require.NoError(t, tool.Start())
	t.Cleanup(func() {
		_ = tool.Process.Signal(os.Interrupt)
		assert.NoError(t, tool.Wait(), "the example server stops cleanly on SIGINT: %s", stderr.String())
	})
	// It serves once its status subject answers.
	require.Eventually(t, func() bool {
		_, err := n.Conn.Request(subject+remote.StatusSuffix, []byte(`{"v":1,"op_id":"op_00000000000000000000000000000000"}`), 200*time.Millisecond)
		return err == nil
	}, 20*time.Second, 50*time.Millisecond, "the example server did not serve: %s", stderr.String())

	r, err := remote.New(remote.Config{Conn: n.Conn, Tool: "append", Subject: subject, Timeout: 5 * time.Second, StatusTimeout: 5 * time.Second})
	require.NoError(t, err)
	a := apptest.StartApp(t, app.Config{NATSURL: n.Server.ClientURL(), Executors: []executor.Executor{r}})
	c, _ := apptest.Client(t, a.ClientURL(), producers.WithWait(10*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := events.Request{Workspace: "w", Agent: "a", Tool: "append", Args: json.RawMessage(`{"line":"hello"}`)}
	res, err := c.Submit(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, events.StateCompleted, res.State)
	assert.JSONEq(t, `{"lines":1}`, string(res.Result))
	again, err := c.Submit(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, res.OpID, again.OpID)
	// The retry gets the result Airlock kept, not a second call.
	assert.JSONEq(t, `{"lines":1}`, string(again.Result))
	assert.Equal(t, events.Digest([]byte(`{"lines":1}`)), again.ResultDigest)
	data, err := os.ReadFile(lines)
	require.NoError(t, err)
	assert.Equal(t, "hello\n", string(data))
}
