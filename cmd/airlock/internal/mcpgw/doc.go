// Package mcpgw is Airlock's MCP front door, `airlock mcp`: an MCP server
// (over stdio, or streamable HTTP with one agent per bearer token) whose
// tools are the tools Airlock serves, each call an op under the policy.
// A call that is held waits for its approval up to a bound, with
// progress notifications, and otherwise returns APPROVAL_REQUIRED with
// the hold's id; the same call again returns the same hold, and the
// result once it has run. It is a client of a running Airlock over NATS;
// it runs nothing itself. The configuration file (Load) also names the
// upstream MCP servers `airlock serve --mcp FILE` puts behind Airlock.
package mcpgw
