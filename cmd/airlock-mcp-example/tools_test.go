package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The schemas a client must see, written out here rather than taken from
// the server's constants.
const (
	wantLineSchema = `{"type":"string","minLength":1,"maxLength":4096,"pattern":"^[^\\n]*$",` +
		`"description":"the line to append: 1 to 4096 bytes, no newline"}`
	wantLinesOutput = `{"type":"object","properties":{"lines":{"type":"integer","minimum":0}},` +
		`"required":["lines"],"additionalProperties":false}`
	wantEmptyInput = `{"type":"object","properties":{},"additionalProperties":false}`
)

// The server identifies itself and lists its four tools with their
// schemas and annotations.
func TestListTools(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		cs, _ := start(t, transport, newFiles(t), nil)
		info := cs.InitializeResult()
		require.NotNil(t, info)
		assert.Equal(t, "airlock-mcp-example", info.ServerInfo.Name)
		assert.Equal(t, "v1", info.ServerInfo.Version)
		require.NotNil(t, info.Capabilities.Tools)
		assert.True(t, info.Capabilities.Tools.ListChanged)

		res, err := cs.ListTools(testContext(t), nil)
		require.NoError(t, err)
		tools := map[string]*mcp.Tool{}
		for _, tool := range res.Tools {
			tools[tool.Name] = tool
		}
		require.ElementsMatch(t, []string{"append", "slow_append", "peek", "garbage"}, slices.Collect(maps.Keys(tools)))

		write := &mcp.ToolAnnotations{DestructiveHint: new(false), OpenWorldHint: new(false)}
		want := []struct {
			name, input, output string
			annotations         *mcp.ToolAnnotations
		}{
			{"append", `{"type":"object","properties":{"line":` + wantLineSchema + `},` +
				`"required":["line"],"additionalProperties":false}`, wantLinesOutput, write},
			{"slow_append", `{"type":"object","properties":{"line":` + wantLineSchema + `,` +
				`"delay_ms":{"type":"integer","minimum":0,"maximum":600000,` +
				`"description":"milliseconds to wait after appending, before answering"}},` +
				`"required":["line","delay_ms"],"additionalProperties":false}`, wantLinesOutput, write},
			{"peek", wantEmptyInput, wantLinesOutput, &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(false)}},
			{"garbage", wantEmptyInput, "", &mcp.ToolAnnotations{DestructiveHint: new(true), OpenWorldHint: new(false)}},
		}
		for _, w := range want {
			tool := tools[w.name]
			assert.JSONEq(t, w.input, jsonOf(t, tool.InputSchema), w.name)
			if w.output == "" {
				assert.Nil(t, tool.OutputSchema, w.name)
			} else {
				assert.JSONEq(t, w.output, jsonOf(t, tool.OutputSchema), w.name)
			}
			assert.Equal(t, w.annotations, tool.Annotations, w.name)
			assert.NotEmpty(t, tool.Description, w.name)
		}
		assert.Equal(t, defaultDescription, tools["append"].Description)
	})
}

// jsonOf marshals v.
func jsonOf(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	require.NoError(t, err)
	return string(data)
}

// append and slow_append append and count, peek counts; each call is
// recorded in --calls.
func TestAppend(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		f := newFiles(t)
		cs, _ := start(t, transport, f, nil)
		requireLines(t, callTool(t, cs, "peek", nil), "0", 0)
		requireLines(t, callTool(t, cs, "append", map[string]any{"line": "first"}), "appended line 1", 1)
		requireLines(t, callTool(t, cs, "append", map[string]any{"line": "second line"}), "appended line 2", 2)
		assert.Equal(t, "first\nsecond line\n", read(t, f.out))
		assert.Equal(t, "peek\nappend first\nappend second line\n", read(t, f.calls))

		begin := time.Now()
		requireLines(t, callTool(t, cs, "slow_append", map[string]any{"line": "third", "delay_ms": 200}), "appended line 3", 3)
		assert.GreaterOrEqual(t, time.Since(begin), 200*time.Millisecond, "slow_append answered before its delay")
		requireLines(t, callTool(t, cs, "slow_append", map[string]any{"line": "fourth", "delay_ms": 0}), "appended line 4", 4)
		requireLines(t, callTool(t, cs, "peek", map[string]any{}), "4", 4)
		assert.Equal(t, "first\nsecond line\nthird\nfourth\n", read(t, f.out))
		assert.Equal(t, "peek\nappend first\nappend second line\nslow_append third\nslow_append fourth\npeek\n", read(t, f.calls))
	})
}

// Concurrent calls are serialized: every line lands whole, and each call
// gets a distinct count.
func TestConcurrentAppends(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		f := newFiles(t)
		cs, _ := start(t, transport, f, nil)
		const n = 20
		counts := make([]int, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				res, err := cs.CallTool(testContext(t), &mcp.CallToolParams{Name: "append", Arguments: map[string]any{"line": fmt.Sprintf("line %02d", i)}})
				if !assert.NoError(t, err) || !assert.False(t, res.IsError) {
					return
				}
				var out struct{ Lines int }
				if assert.NoError(t, json.Unmarshal([]byte(structured(t, res)), &out)) {
					counts[i] = out.Lines
				}
			})
		}
		wg.Wait()
		slices.Sort(counts)
		want := make([]int, n)
		wantLines := make([]string, n)
		wantCalls := make([]string, n)
		for i := range n {
			want[i] = i + 1
			wantLines[i] = fmt.Sprintf("line %02d", i)
			wantCalls[i] = "append " + wantLines[i]
		}
		assert.Equal(t, want, counts)
		assert.ElementsMatch(t, wantLines, strings.Split(strings.TrimSuffix(read(t, f.out), "\n"), "\n"))
		assert.ElementsMatch(t, wantCalls, strings.Split(strings.TrimSuffix(read(t, f.calls), "\n"), "\n"))
	})
}

// Bad arguments get a tool error that says what is wrong; nothing is
// appended and no call is recorded, and the server goes on serving.
func TestBadArgs(t *testing.T) {
	cases := []struct {
		tool string
		args any
		want string
	}{
		{"append", map[string]any{}, `argument "line" (a string) is required`},
		{"append", map[string]any{"line": nil}, `argument "line" (a string) is required`},
		{"append", map[string]any{"line": "x", "extra": 1}, `unknown argument "extra" (allowed: "line")`},
		{"append", map[string]any{"Line": "x"}, `unknown argument "Line" (allowed: "line")`},
		{"append", json.RawMessage(`{"line":"x","line":"y"}`), `argument "line" is given twice`},
		{"append", map[string]any{"line": 5}, `argument "line" must be a string, not number`},
		{"append", map[string]any{"line": []string{"x"}}, `argument "line" must be a string, not array`},
		{"append", map[string]any{"line": "two\nlines"}, `argument "line" must not contain a newline`},
		{"append", map[string]any{"line": ""}, `argument "line" must not be empty`},
		{"append", map[string]any{"line": strings.Repeat("é", 2049)}, `argument "line" is 4098 bytes long; at most 4096 are allowed`},
		{"slow_append", map[string]any{"line": "x"}, `argument "delay_ms" (an integer) is required`},
		{"slow_append", map[string]any{"delay_ms": 1}, `argument "line" (a string) is required`},
		{"slow_append", map[string]any{"line": "x", "delay_ms": 1.5}, `argument "delay_ms" must be an integer, not 1.5`},
		{"slow_append", map[string]any{"line": "x", "delay_ms": -1}, `argument "delay_ms" must be from 0 to 600000, not -1`},
		{"slow_append", map[string]any{"line": "x", "delay_ms": 600001}, `argument "delay_ms" must be from 0 to 600000, not 600001`},
		{"slow_append", map[string]any{"line": "x", "delay_ms": "5"}, `argument "delay_ms" must be a number, not string`},
		{"slow_append", map[string]any{"line": "x", "delay_ms": 1, "more": true}, `unknown argument "more" (allowed: "line", "delay_ms")`},
		{"peek", map[string]any{"x": 1}, `unknown argument "x" (allowed: none)`},
		{"garbage", map[string]any{"x": 1}, `unknown argument "x" (allowed: none)`},
	}
	forEachTransport(t, func(t *testing.T, transport string) {
		f := newFiles(t)
		cs, _ := start(t, transport, f, nil)
		for _, c := range cases {
			res := callTool(t, cs, c.tool, c.args)
			assert.True(t, res.IsError, "%s %v: not a tool error", c.tool, c.args)
			assert.Equal(t, c.tool+": bad arguments: "+c.want, text(t, res), "%s %v", c.tool, c.args)
		}
		assert.NoFileExists(t, f.out)
		assert.NoFileExists(t, f.calls)

		// Good arguments of the limits work, and the server still serves.
		long := strings.Repeat("é", 2048)
		requireLines(t, callTool(t, cs, "append", map[string]any{"line": long}), "appended line 1", 1)
		requireLines(t, callTool(t, cs, "slow_append", json.RawMessage(`{"line":"x","delay_ms":1e1}`)), "appended line 2", 2)
		assert.Equal(t, long+"\nx\n", read(t, f.out))
		assert.Equal(t, "append "+long+"\nslow_append x\n", read(t, f.calls))
	})
}

// An unknown tool is a protocol error, not recorded.
func TestUnknownTool(t *testing.T) {
	f := newFiles(t)
	cs, _ := startStdio(t, f, nil)
	_, err := cs.CallTool(testContext(t), &mcp.CallToolParams{Name: "nope"})
	require.Error(t, err)
	assert.ErrorContains(t, err, `unknown tool "nope"`)
	assert.NoFileExists(t, f.calls)
}
