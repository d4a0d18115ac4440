package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Names of the tools.
const (
	toolAppend     = "append"
	toolSlowAppend = "slow_append"
	toolPeek       = "peek"
	toolGarbage    = "garbage"
)

// The tools' JSON Schemas. The handlers check the same rules themselves:
// Server.AddTool does not validate arguments. maxLength counts characters
// where the handlers count bytes (at most maxLineBytes); the descriptions
// say bytes.
const (
	appendSchema = `{"type":"object",` +
		`"properties":{"line":{"type":"string","minLength":1,"maxLength":4096,"pattern":"^[^\\n]*$",` +
		`"description":"the line to append: 1 to 4096 bytes, no newline"}},` +
		`"required":["line"],"additionalProperties":false}`
	slowAppendSchema = `{"type":"object",` +
		`"properties":{"line":{"type":"string","minLength":1,"maxLength":4096,"pattern":"^[^\\n]*$",` +
		`"description":"the line to append: 1 to 4096 bytes, no newline"},` +
		`"delay_ms":{"type":"integer","minimum":0,"maximum":600000,` +
		`"description":"milliseconds to wait after appending, before answering"}},` +
		`"required":["line","delay_ms"],"additionalProperties":false}`
	emptySchema = `{"type":"object","properties":{},"additionalProperties":false}`
	linesSchema = `{"type":"object","properties":{"lines":{"type":"integer","minimum":0}},` +
		`"required":["lines"],"additionalProperties":false}`
)

// defaultDescription is the append tool's description without
// --description-file.
const defaultDescription = "Appends a line (1 to 4096 bytes, no newline) to the output file and returns the file's new line count."

// serverName and serverVersion identify the server to clients.
const (
	serverName    = "airlock-mcp-example"
	serverVersion = "v1"
)

// toolset holds the handlers of the tools and what they share.
type toolset struct {
	store *store
	// stop is closed when the server shuts down; slow_append stops
	// sleeping then.
	stop <-chan struct{}
	// garbage is how the garbage tool misbehaves once its call is
	// recorded; it does not return.
	garbage func()
	log     *slog.Logger
}

// newServer returns the MCP server with the four tools; description is
// the append tool's.
func newServer(ts *toolset, description string, log *slog.Logger) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: serverName, Version: serverVersion}, &mcp.ServerOptions{
		Logger:       log,
		Instructions: "An example upstream server: its tools append lines to a file and count them.",
		// Tools only, announcing list changes; no logging capability.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	srv.AddTool(appendTool(description), ts.handleAppend)
	srv.AddTool(slowAppendTool(), ts.handleSlowAppend)
	srv.AddTool(peekTool(), ts.handlePeek)
	srv.AddTool(garbageTool(), ts.handleGarbage)
	return srv
}

// setDescription replaces the append tool by one with description d;
// the SDK tells the clients that the tool list changed.
func (ts *toolset) setDescription(srv *mcp.Server, d string) {
	srv.AddTool(appendTool(d), ts.handleAppend)
	ts.log.Info("append tool description changed", "description", d)
}

// appendTool is the definition of append, with the given description.
func appendTool(description string) *mcp.Tool {
	return &mcp.Tool{
		Name:         toolAppend,
		Title:        "Append a line",
		Description:  description,
		InputSchema:  json.RawMessage(appendSchema),
		OutputSchema: json.RawMessage(linesSchema),
		Annotations:  writeAnnotations(),
	}
}

// slowAppendTool is the definition of slow_append.
func slowAppendTool() *mcp.Tool {
	return &mcp.Tool{
		Name:  toolSlowAppend,
		Title: "Append a line, answer late",
		Description: "Appends a line (1 to 4096 bytes, no newline) to the output file like append, " +
			"then waits delay_ms milliseconds before it answers with the file's new line count.",
		InputSchema:  json.RawMessage(slowAppendSchema),
		OutputSchema: json.RawMessage(linesSchema),
		Annotations:  writeAnnotations(),
	}
}

// peekTool is the definition of peek.
func peekTool() *mcp.Tool {
	return &mcp.Tool{
		Name:         toolPeek,
		Title:        "Count the lines",
		Description:  "Returns the number of lines in the output file. Changes nothing.",
		InputSchema:  json.RawMessage(emptySchema),
		OutputSchema: json.RawMessage(linesSchema),
		Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(false)},
	}
}

// garbageTool is the definition of garbage.
func garbageTool() *mcp.Tool {
	return &mcp.Tool{
		Name:  toolGarbage,
		Title: "Misbehave",
		Description: "Makes the server misbehave, for tests: over stdio it writes a line that is not JSON " +
			"to stdout and exits; over HTTP it exits without answering.",
		InputSchema: json.RawMessage(emptySchema),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: new(true), OpenWorldHint: new(false)},
	}
}

// writeAnnotations are the annotations of the tools that append: they
// change the file, only by adding to it, and a second call adds again.
func writeAnnotations() *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{
		ReadOnlyHint:    false,
		DestructiveHint: new(false),
		IdempotentHint:  false,
		OpenWorldHint:   new(false),
	}
}

// handleAppend handles append: it appends the line and answers the new count.
func (ts *toolset) handleAppend(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var args lineArgs
	if err := decodeArgs(req.Params.Arguments, &args, "line"); err != nil {
		return toolError(toolAppend, err), nil
	}
	line, err := args.check()
	if err != nil {
		return toolError(toolAppend, err), nil
	}
	n, err := ts.store.appendLine(toolAppend, line)
	if err != nil {
		return ts.failed(toolAppend, err), nil
	}
	return linesResult("appended line "+strconv.Itoa(n), n), nil
}

// handleSlowAppend handles slow_append: it appends the line, then sleeps
// delay_ms before it answers, unless the call is cancelled or the server
// shuts down first.
func (ts *toolset) handleSlowAppend(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var args slowArgs
	if err := decodeArgs(req.Params.Arguments, &args, "line", "delay_ms"); err != nil {
		return toolError(toolSlowAppend, err), nil
	}
	line, ms, err := args.check()
	if err != nil {
		return toolError(toolSlowAppend, err), nil
	}
	n, err := ts.store.appendLine(toolSlowAppend, line)
	if err != nil {
		return ts.failed(toolSlowAppend, err), nil
	}
	if err := ts.sleep(ctx, time.Duration(ms)*time.Millisecond); err != nil {
		return ts.failed(toolSlowAppend, fmt.Errorf("appended line %d, then %w", n, err)), nil
	}
	return linesResult("appended line "+strconv.Itoa(n), n), nil
}

// sleep waits for d, or returns an error when ctx ends or the server shuts
// down first.
func (ts *toolset) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the call was cancelled during the delay: %w", context.Cause(ctx))
	case <-ts.stop:
		return fmt.Errorf("the server shut down during the delay")
	}
}

// handlePeek handles peek: it answers the number of lines of --out.
func (ts *toolset) handlePeek(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if err := decodeArgs(req.Params.Arguments, &noArgs{}); err != nil {
		return toolError(toolPeek, err), nil
	}
	n, err := ts.store.peek()
	if err != nil {
		return ts.failed(toolPeek, err), nil
	}
	return linesResult(strconv.Itoa(n), n), nil
}

// handleGarbage handles garbage: it records the call and misbehaves, never
// answering.
func (ts *toolset) handleGarbage(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if err := decodeArgs(req.Params.Arguments, &noArgs{}); err != nil {
		return toolError(toolGarbage, err), nil
	}
	if err := ts.store.recordCall(toolGarbage); err != nil {
		return ts.failed(toolGarbage, err), nil
	}
	ts.log.Warn("garbage called: misbehaving and exiting", "status", exitGarbage)
	ts.garbage()
	return nil, fmt.Errorf("garbage: the server did not exit") // not reached
}

// linesResult is a tool answer with text and {"lines": n}.
func linesResult(text string, n int) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: text}},
		StructuredContent: map[string]any{"lines": n},
	}
}

// toolError is the answer to a call of tool with bad arguments: a tool
// error (isError) that says what is wrong.
func toolError(tool string, err error) *mcp.CallToolResult {
	res := &mcp.CallToolResult{}
	res.SetError(fmt.Errorf("%s: bad arguments: %w", tool, err))
	return res
}

// failed is the answer to a call of tool whose effect failed, logged too.
func (ts *toolset) failed(tool string, err error) *mcp.CallToolResult {
	ts.log.Error("tool failed", "tool", tool, "err", err)
	res := &mcp.CallToolResult{}
	res.SetError(fmt.Errorf("%s: %w", tool, err))
	return res
}
