package mcpgw

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Garbage on stdin is answered with a JSON-RPC error and the session
// goes on: a tools/list after it is answered.
func TestStdioAnswersGarbageAndGoesOn(t *testing.T) {
	g := testGateway(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	srv := g.Server(agent)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, Stdio(inR, outW, slog.New(slog.DiscardHandler))) }()
	replies := bufio.NewScanner(outR)
	replies.Buffer(nil, 1<<20)
	next := func() map[string]any {
		t.Helper()
		lines := make(chan string, 1)
		go func() {
			if replies.Scan() {
				lines <- replies.Text()
			}
			close(lines)
		}()
		select {
		case l, ok := <-lines:
			require.True(t, ok, "the session ended")
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(l), &m), l)
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("no reply")
		}
		return nil
	}
	send := func(s string) {
		_, err := io.WriteString(inW, s+"\n")
		require.NoError(t, err)
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	assert.NotNil(t, next()["result"])
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for _, tc := range []struct {
		line string
		code float64
		id   any
	}{
		{"this is not json", -32700, nil},
		{`{"jsonrpc":"2.0","id":2,"method":`, -32700, nil},
		{`[{"jsonrpc":"2.0","id":3,"method":"tools/list"}]`, -32600, nil},
		{`{"jsonrpc":"1.0","id":4,"method":"tools/list"}`, -32600, float64(4)},
		{`"just a string"`, -32600, nil},
		{`{"jsonrpc":"2.0","id":"x","method":"` + strings.Repeat("a", MaxLineBytes) + `"}`, -32700, nil},
	} {
		send(tc.line)
		r := next()
		e, ok := r["error"].(map[string]any)
		require.True(t, ok, "%.60s: %v", tc.line, r)
		assert.Equal(t, tc.code, e["code"], "%.60s", tc.line)
		assert.Equal(t, tc.id, r["id"], "%.60s", tc.line)
	}
	send(`{"jsonrpc":"2.0","id":9,"method":"tools/list"}`)
	r := next()
	assert.Equal(t, float64(9), r["id"])
	res, ok := r["result"].(map[string]any)
	require.True(t, ok, "%v", r)
	assert.Len(t, res["tools"], 3)
	require.NoError(t, inW.Close())
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not end when stdin closed")
	}
}
