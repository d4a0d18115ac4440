// Command airlock-mcp-example is an example upstream MCP server. Airlock's
// MCP gateway tests run it as the server behind the gateway, and you can
// use it to try `airlock mcp` by hand. Its tools append lines to a file:
//
//	append       {"line": "hello"}                  -> "appended line 3", {"lines": 3}
//	slow_append  {"line": "hello", "delay_ms": 500} -> the same, answered after the delay
//	peek         {}                                 -> "3", {"lines": 3}
//	garbage      {}                                 -> no answer; the server misbehaves and exits 3
//
// A line is 1 to 4096 bytes and has no newline. The server checks arguments
// strictly itself, since the SDK's Server.AddTool does not: a missing,
// unknown, repeated or mistyped argument gets a tool error (isError) that
// says what is wrong, and then the call has no effect and is not recorded.
//
// Every tools/call with good arguments adds one line to the --calls file,
// "<tool> <line>" (just "<tool>" for peek and garbage). The line is written
// and fsynced before the call has any effect, so a test can count the calls
// the server received, across restarts and kills too. slow_append appends
// first and sleeps afterwards. A test that kills the server during the sleep
// leaves an effect that was never answered. garbage stands for a broken
// upstream. Over stdio it writes a line that is not JSON to stdout and
// exits with status 3. Over HTTP it exits with status 3 without answering.
//
// # Flags
//
//	--out FILE               required: the file the tools append lines to
//	--calls FILE             required: the file of one line per call received
//	--http ADDR              serve streamable HTTP at ADDR, path /mcp (e.g. 127.0.0.1:8080;
//	                         port 0 picks one, logged as url=...); empty: serve stdio
//	--token TOKEN            HTTP only: require "Authorization: Bearer TOKEN", else 401
//	--pid-file FILE          write the process id to FILE at start
//	--description-file FILE  the append tool's description is FILE's trimmed content.
//	                         The server polls the file every 100ms. When the content
//	                         changes it replaces the tool, and clients get
//	                         notifications/tools/list_changed.
//
// An empty or unreadable description file keeps the current description
// (at start it is an error). A writer that truncates the file before it
// writes is therefore never seen as an empty description. Logs go to
// stderr.
//
// SIGINT and SIGTERM shut the server down cleanly, with status 0. A
// slow_append that is still sleeping stops, and its line stays appended.
// Its answer (a tool error) is usually lost, because the SDK closes the
// sessions without sending the answers still pending. Use SIGKILL to get
// an effect without an answer every time. The exit status is 0 after a
// clean end (a signal, or stdin closed), 1 after an error, 2 for bad
// flags, and 3 after garbage.
//
// # Trying it with airlock mcp
//
//	airlock-mcp-example --http 127.0.0.1:8931 --token s3cret \
//	    --out ./mcp-out.log --calls ./mcp-calls.log
//
// or, over stdio, have the gateway start
//
//	airlock-mcp-example --out ./mcp-out.log --calls ./mcp-calls.log
//
// It is an example and a test fixture, not a production server: it
// re-reads --out to count its lines on every call.
package main
