package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// initializeBody is a JSON-RPC initialize request.
const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",` +
	`"capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`

// postInitialize posts an initialize request to url with the given
// Authorization header (none if empty) and returns the status code.
func postInitialize(t *testing.T, url, authorization string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(testContext(t), http.MethodPost, url, strings.NewReader(initializeBody))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := httpClient(t, "").Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// With --token, a request without the bearer token, or with another, gets
// 401 and reaches no tool; with it, the client works.
func TestHTTPToken(t *testing.T) {
	t.Parallel()
	f := newFiles(t)
	p := startHTTP(t, f, "--token", testToken)

	resp, err := httpClient(t, "").Post(p.url, "application/json", strings.NewReader(initializeBody))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "plain http.Post without a token")
	assert.Equal(t, http.StatusUnauthorized, postInitialize(t, p.url, "Bearer wrong-token"))
	assert.Equal(t, http.StatusUnauthorized, postInitialize(t, p.url, "Basic "+testToken))
	assert.Equal(t, http.StatusUnauthorized, postInitialize(t, p.url, "Bearer "+testToken+"x"))
	assert.Equal(t, http.StatusOK, postInitialize(t, p.url, "Bearer "+testToken), "the token itself")

	for _, token := range []string{"", "wrong-token"} {
		_, err := connectHTTP(t, p.url, token, nil)
		require.Error(t, err, "connecting with token %q", token)
		assert.ErrorContains(t, err, "Unauthorized", "connecting with token %q", token)
	}
	assert.NoFileExists(t, f.calls)

	cs, err := connectHTTP(t, p.url, testToken, nil)
	require.NoError(t, err)
	requireLines(t, callTool(t, cs, "append", map[string]any{"line": "authorized"}), "appended line 1", 1)
	assert.Equal(t, "append authorized\n", read(t, f.calls))
}

// Without --token, HTTP needs no Authorization header.
func TestHTTPNoToken(t *testing.T) {
	t.Parallel()
	f := newFiles(t)
	p := startHTTP(t, f)
	assert.Equal(t, http.StatusOK, postInitialize(t, p.url, ""))
	cs, err := connectHTTP(t, p.url, "", nil)
	require.NoError(t, err)
	requireLines(t, callTool(t, cs, "append", map[string]any{"line": "open"}), "appended line 1", 1)

	resp, err := httpClient(t, "").Get(strings.TrimSuffix(p.url, "/mcp") + "/other")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "only /mcp is served")
}
