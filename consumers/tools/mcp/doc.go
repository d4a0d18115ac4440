// Package mcp calls the tools of upstream MCP servers as Airlock
// executors: each tool an upstream server lists is an Airlock tool named
// <upstream>__<tool>, and the call to the upstream server is the op's
// side effect, made once.
//
// # Once
//
// Before a call is sent, its attempt is recorded durably in a ledger
// (internal/ledger); its answer is recorded after it arrives. A call whose
// answer never came (the upstream hung past its timeout, died, or
// answered with something that is not MCP) may have taken effect: the op
// ends ambiguous and the call is never sent again. A crash between
// sending and recording ends the same way on recovery. A call that failed
// before anything was sent (the upstream cannot be reached) fails the op
// with EXECUTOR_FAILED and says nothing was sent.
//
// # Classes
//
// The configuration classifies each upstream tool by name or pattern;
// a tool no rule names is destructive. The tool's own annotations are
// the upstream's word, so they may raise its class and never lower it:
// readOnlyHint false raises read to write, destructiveHint true raises
// any class to destructive, openWorldHint true raises read or write to
// network.
//
// # Definitions are operands
//
// Operands returns the digest of the tool's definition (name,
// description, input schema) as the upstream lists it now: the gate
// records it when it decides, and the runner takes it again before the
// call, so a tool whose definition changed after a hold was created
// fails its op with OPERANDS_CHANGED and nothing is sent.
package mcp
