package mcpgw

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/producers"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const execSchema = `{"type":"object","additionalProperties":false,"required":["argv"],"properties":{"argv":{"type":"array","minItems":1,"items":{"type":"string"}}}}`

func testGateway(t testing.TB) *Gateway {
	t.Helper()
	g, err := New(Config{}, &events.ToolCatalog{Tools: []events.ToolInfo{
		{Name: "exec", Class: events.ClassExec, InputSchema: json.RawMessage(execSchema)},
		{Name: "odd", Class: events.ClassRead, InputSchema: json.RawMessage(`{"type":"array"}`)},
		{Name: "notes__append", Class: events.ClassWrite, InputSchema: json.RawMessage(`{"type":"object","properties":{"line":{"type":"string"}}}`), Upstream: "notes"},
	}})
	require.NoError(t, err)
	return g
}

var agent = &Agent{Name: "a", Workspace: "w"}

func codeOf(res *sdk.CallToolResult) events.Code {
	c, _ := res.StructuredContent.(map[string]any)["error_code"].(events.Code)
	return c
}

func TestArgumentsAreHeldToTheSchema(t *testing.T) {
	g := testGateway(t)
	exec := g.tools["exec"]
	for _, tc := range []struct {
		args string
		code events.Code
	}{
		{`{"argv":["true"]}`, ""},
		{`{}`, events.CodeInvalidArgs},
		{``, events.CodeInvalidArgs}, // none is {} and argv is missing
		{`{"argv":"true"}`, events.CodeInvalidArgs},
		{`{"argv":["true"],"extra":1}`, events.CodeInvalidArgs},
		{`[1]`, events.CodeInvalidArgs},
		{`{"argv":["true"]`, events.CodeInvalidArgs},
		{`{"argv":["` + strings.Repeat("x", events.MaxArgsBytes) + `"]}`, events.CodeArgsTooLarge},
		{`{"argv":["` + strings.Repeat("x", 2*events.MaxArgsBytes) + `"]}`, events.CodeArgsTooLarge},
	} {
		r, refused := exec.request(agent, json.RawMessage(tc.args))
		if tc.code == "" {
			require.Nil(t, refused, tc.args)
			assert.Equal(t, "exec", r.Tool)
			assert.Equal(t, "a", r.Agent)
			assert.Equal(t, "w", r.Workspace)
			continue
		}
		require.NotNil(t, refused, "%.80s", tc.args)
		assert.True(t, refused.IsError)
		assert.Equal(t, tc.code, codeOf(refused), "%.80s", tc.args)
	}
	// A schema that is no object schema (MCP wants one) is shown, and
	// checked, as any object.
	odd := g.tools["odd"]
	var shown map[string]any
	require.NoError(t, json.Unmarshal(odd.raw, &shown))
	assert.Equal(t, "object", shown["type"])
	_, refused := odd.request(agent, json.RawMessage(`{"any":1}`))
	assert.Nil(t, refused)

	// The retry argument is every tool's, shown in its schema, taken
	// out before the tool's own schema (which refuses extra fields)
	// checks the rest, and made the request's idempotency key.
	assert.Contains(t, string(exec.raw), RetryArg)
	r, refused := exec.request(agent, json.RawMessage(`{"argv":["true"],"_airlock_retry":"2"}`))
	require.Nil(t, refused)
	assert.Equal(t, "2", r.IdempotencyKey)
	assert.JSONEq(t, `{"argv":["true"]}`, string(r.Args))
	plain, _ := exec.request(agent, json.RawMessage(`{"argv":["true"]}`))
	_, op1 := r.Identity()
	_, op2 := plain.Identity()
	assert.NotEqual(t, op1, op2, "a retry is another op")
	for _, bad := range []string{`{"argv":["true"],"_airlock_retry":""}`, `{"argv":["true"],"_airlock_retry":3}`, `{"argv":["true"],"_airlock_retry":"` + strings.Repeat("k", events.MaxIdempotencyKeyBytes+1) + `"}`} {
		_, refused = exec.request(agent, json.RawMessage(bad))
		require.NotNil(t, refused, bad)
		assert.Contains(t, []events.Code{events.CodeInvalidArgs, events.CodeInvalidIdempotencyKey}, codeOf(refused), "%.60s", bad)
	}
}

// A schema that refers to a file is not read from the gateway's disk.
func TestSchemasReadNothingOutside(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret.json")
	require.NoError(t, os.WriteFile(secret, []byte(`{"type":"object","required":["never"]}`), 0o600))
	g, err := New(Config{}, &events.ToolCatalog{Tools: []events.ToolInfo{
		{Name: "sly", Class: events.ClassRead, InputSchema: json.RawMessage(`{"type":"object","$ref":"file://` + secret + `"}`)},
	}})
	require.NoError(t, err)
	assert.Nil(t, g.tools["sly"].schema, "the $ref is refused, so the schema does not compile")
	_, refused := g.tools["sly"].request(agent, json.RawMessage(`{}`))
	assert.Nil(t, refused, "checked as an object only, never by the file's schema")
}

func TestOutcomesAsToolResults(t *testing.T) {
	g := testGateway(t)
	exec, up := g.tools["exec"], g.tools["notes__append"]
	exp := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

	res, label := render(exec, producers.Outcome{OpID: "op1", State: events.StateCompleted, Result: json.RawMessage(`{"exit_code":0,"stdout":"hi\n"}`), ResultDigest: "sha256:ab"}, time.Second)
	assert.Equal(t, "completed", label)
	assert.False(t, res.IsError)
	assert.Contains(t, res.Content[0].(*sdk.TextContent).Text, `"stdout": "hi\n"`)
	sc := res.StructuredContent.(map[string]any)
	assert.Equal(t, "op1", sc["op_id"])
	assert.Equal(t, events.StateCompleted, sc["state"])
	assert.Equal(t, "sha256:ab", sc["result_digest"])

	res, label = render(exec, producers.Outcome{OpID: "op1", State: events.StateHeld, Pending: true, Code: events.CodeApprovalRequired, HoldID: "h1", ArgsDigest: "sha256:cd", HoldExpiresAt: &exp}, 3*time.Second)
	assert.Equal(t, "held", label)
	assert.True(t, res.IsError)
	assert.NotContains(t, res.Content[0].(*sdk.TextContent).Text, "holds grant", "the model is not handed the approval command")
	sc = res.StructuredContent.(map[string]any)
	assert.Equal(t, events.CodeApprovalRequired, sc["error_code"])
	assert.Equal(t, "h1", sc["hold_id"])
	assert.Equal(t, "2026-12-01T10:00:00Z", sc["expires_at"])
	text := res.Content[0].(*sdk.TextContent).Text
	for _, want := range []string{"hold id h1", "ask the user to approve hold h1", "call this tool again with the same arguments", "do not try to approve it yourself"} {
		assert.Contains(t, strings.ToLower(text), strings.ToLower(want))
	}

	for state, code := range map[events.State]events.Code{events.StateDenied: events.CodePolicyDenied, events.StateExpired: events.CodeHoldExpired, events.StateAmbiguous: events.CodeAmbiguous, events.StateFailed: events.CodeExecutorFailed} {
		res, label = render(exec, producers.Outcome{OpID: "op1", State: state, Code: code, Message: "why"}, time.Second)
		assert.Equal(t, string(state), label)
		assert.True(t, res.IsError)
		assert.Equal(t, code, codeOf(res))
	}
	res, label = render(exec, producers.Outcome{OpID: "op1", State: events.StateExecuting, Pending: true}, time.Second)
	assert.Equal(t, "pending", label)
	assert.Equal(t, events.CodePending, codeOf(res))

	// An upstream tool's answer passes through as MCP content, and its
	// own error flag with it.
	res, _ = render(up, producers.Outcome{OpID: "op2", State: events.StateCompleted, ResultDigest: "sha256:ef",
		Result: json.RawMessage(`{"content":[{"type":"text","text":"appended line 3"}],"structuredContent":{"lines":3},"isError":true}`)}, time.Second)
	assert.True(t, res.IsError)
	assert.Equal(t, "appended line 3", res.Content[0].(*sdk.TextContent).Text)
	sc = res.StructuredContent.(map[string]any)
	assert.Equal(t, "op2", sc["op_id"])
	assert.JSONEq(t, `{"lines":3}`, string(sc["result"].(json.RawMessage)))

	// A completed op whose result is gone says so, and is not an error
	// to run again.
	res, _ = render(exec, producers.Outcome{OpID: "op3", State: events.StateCompleted, ResultDigest: "sha256:01", ResultCode: events.CodeResultExpired}, time.Second)
	assert.False(t, res.IsError)
	assert.Contains(t, res.Content[0].(*sdk.TextContent).Text, "RESULT_EXPIRED")
}

func TestUpdateChangesTheServersTools(t *testing.T) {
	g := testGateway(t)
	g.Server(agent)
	g.Update(&events.ToolCatalog{Tools: []events.ToolInfo{{Name: "exec", Class: events.ClassExec, InputSchema: json.RawMessage(execSchema)}, {Name: "new", Class: events.ClassRead, InputSchema: events.AnyObjectSchema}}})
	assert.ElementsMatch(t, []string{"exec", "new"}, slices.Collect(func(yield func(string) bool) {
		for n := range g.tools {
			if !yield(n) {
				return
			}
		}
	}))
}

// Whatever a client sends as a call's arguments, the gateway either
// makes a valid request of it or refuses it with a documented code; it
// never panics and never submits what Validate refuses.
func FuzzRequest(f *testing.F) {
	for _, s := range []string{`{"argv":["true"]}`, `{}`, ``, `null`, `[]`, `{"argv":[1]}`, `{"argv":["a"],"argv":["b"]}`, "{\"argv\":[\"\\u0000\"]}", `{"line":"x"}`, `1e999`} {
		f.Add(s)
	}
	g := testGateway(f)
	f.Fuzz(func(t *testing.T, raw string) {
		for _, tl := range g.tools {
			r, refused := tl.request(agent, json.RawMessage(raw))
			if refused != nil {
				if !slices.Contains(events.AllCodes, codeOf(refused)) {
					t.Fatalf("code %q of %q is not documented", codeOf(refused), raw)
				}
				continue
			}
			if err := r.Validate(); err != nil {
				t.Fatalf("request of %q does not validate: %v", raw, err)
			}
		}
	})
}
