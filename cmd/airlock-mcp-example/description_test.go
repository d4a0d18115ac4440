package main

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// appendDescription lists the tools and returns the append tool's
// description.
func appendDescription(t *testing.T, cs *mcp.ClientSession) string {
	t.Helper()
	res, err := cs.ListTools(testContext(t), nil)
	require.NoError(t, err)
	require.Len(t, res.Tools, 4)
	for _, tool := range res.Tools {
		if tool.Name == "append" {
			return tool.Description
		}
	}
	require.FailNow(t, "no append tool")
	return ""
}

// awaitSignal waits for a value on ch.
func awaitSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitLong):
		require.FailNow(t, "timed out waiting for "+what)
	}
}

// When the description file changes, the append tool gets the new
// description and the client is told that the tool list changed. An
// empty file keeps the description.
func TestDescriptionFile(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		f := newFiles(t)
		writeAtomic(t, f.desc, "  first description\n")
		changed := make(chan struct{}, 10)
		opts := &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			changed <- struct{}{}
		}}
		cs, _ := start(t, transport, f, opts, "--description-file", f.desc)
		assert.Equal(t, "first description", appendDescription(t, cs))

		writeAtomic(t, f.desc, "second description\n")
		awaitSignal(t, changed, "tools/list_changed")
		assert.Equal(t, "second description", appendDescription(t, cs))

		// An empty file, or the same content again, changes nothing. Three
		// polls pass during the wait.
		writeAtomic(t, f.desc, " \n")
		time.Sleep(3 * pollInterval)
		writeAtomic(t, f.desc, "second description")
		time.Sleep(3 * pollInterval)
		assert.Empty(t, changed, "a notification for an empty or unchanged description")
		assert.Equal(t, "second description", appendDescription(t, cs))

		writeAtomic(t, f.desc, "third description")
		awaitSignal(t, changed, "tools/list_changed")
		assert.Equal(t, "third description", appendDescription(t, cs))

		// The replaced tool still works.
		requireLines(t, callTool(t, cs, "append", map[string]any{"line": "after"}), "appended line 1", 1)
	})
}
