// Command airlock-tool-example is a small tool server for Airlock's remote
// executor (consumers/tools/remote), showing protocol v1 of
// docs/remote.md. Its tool appends a line to a file and returns the file's
// new line count:
//
//	args   {"line": "hello"}
//	result {"lines": 3}
//
// It is idempotent per op id: it records each op in --state (a JSON file,
// synced before every answer), so a second call for an op gets the first
// outcome and appends nothing, across restarts too. It answers status
// queries on <subject>.status from the same records; answering "never"
// records a fence, and the fenced attempt is refused if it ever arrives.
// A record left "started" by a crash makes it answer "unknown": it cannot
// tell whether the line was appended, and says so.
//
// # Running it against airlock serve
//
//	airlock serve --data ./airlock-data &
//	airlock-tool-example --server nats://127.0.0.1:4222 \
//	    --creds ./airlock-data/creds/airlock.creds \
//	    --subject tools.append --state ./append-state.json --out ./append.log
//
// With credentials on (serve's default) the tool server must connect to
// Airlock's NATS account: for now with the service credential
// <data>/creds/airlock.creds, which may do anything; a dedicated tool-server
// role is future work. With `airlock serve --no-auth`, leave out --creds.
// Airlock must run a remote executor for the tool, remote.New(remote.Config{
// Tool: "append", Subject: "tools.append", ...}), registered with its
// executors; see docs/remote.md for how.
//
// It handles one message at a time and keeps every record for ever: an
// example, not a production server.
package main
