// Package periodic runs a function on a fixed interval until a context
// ends: the loop the sweepers and refreshers of Airlock share (the hold
// expirer, the gate's forgetting of expired holds, the MCP gateway's
// catalog refresh).
package periodic
