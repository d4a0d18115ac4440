package events

import "encoding/json"

// QueryToolsSubject is where a client asks an Airlock process for the
// tools it serves (ToolCatalog), with an empty request body. Any process
// answers, with its own tools: processes configured alike serve the same
// ones, but an MCP upstream one process could not reach at its start is
// missing from that process's answer.
const QueryToolsSubject = QueryPrefix + ".tools"

// ToolInfo describes one tool Airlock serves: what front ends (the MCP
// gateway) show an agent.
type ToolInfo struct {
	// Name is the tool's name, the Tool of a Request.
	Name string `json:"name"`
	// Class is the capability class the policy in force gives it.
	Class Class `json:"class"`
	// Description says what a call does, for a person or a model.
	Description string `json:"description,omitempty"`
	// InputSchema is the JSON Schema (an object schema) of the tool's
	// args; {"type":"object"} when the executor says nothing more.
	InputSchema json.RawMessage `json:"input_schema"`
	// Upstream names the MCP server a proxied tool calls; empty for
	// Airlock's own tools.
	Upstream string `json:"upstream,omitempty"`
}

// ToolCatalog is the answer on QueryToolsSubject.
type ToolCatalog struct {
	// Tools are sorted by name.
	Tools []ToolInfo `json:"tools"`
	// PolicyHash is the hash of the policy the classes come from.
	PolicyHash string `json:"policy_hash"`
}

// AnyObjectSchema is the input schema of a tool that says nothing about
// its args but that they are an object.
var AnyObjectSchema = json.RawMessage(`{"type":"object"}`)
