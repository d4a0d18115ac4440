// Package authority creates and loads the NATS credentials of Airlock's
// principals and says what each may publish and subscribe to.
//
// # Principals
//
// A principal is a name and a role. Every data directory has one of each
// default principal (airlock, the service itself; agent; approver;
// operator; auditor) and may have more of the agent, approver, operator
// and auditor roles (Add). Each holds an nkey user seed in
// <data>/creds/<name>.creds, in the decorated format nsc writes, readable
// by [nats.NkeyOptionFromSeed] and by `nats --nkey`. principals.json in the
// same directory lists the name, role and public key of every principal.
//
// # Identity in subjects
//
// An approver resolves a hold by publishing to
// airlock.v1.resolve.<workspace>.<name> and an operator controls Airlock
// on airlock.v1.ctl.<workspace>.<name>; the server lets a principal
// publish only under its own name, so the last token of such a subject
// (events.CommandSubjectParts) is the authenticated principal; [Set.Lookup]
// gives its role and public key.
//
// # Enforcement
//
// [Permissions] gives a role's allow and deny lists. The embedded server
// enforces them when started with [Set.ServerUsers]
// (internal/natsrv.Config.Users); an external server enforces them with
// the block [Set.ServerConfig] renders. docs/authority.md describes the
// model, and what it does not protect.
package authority
