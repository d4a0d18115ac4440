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
// # Accounts
//
// The service principal and the streams live in the NATS account
// [ServiceAccount]; every other principal lives in [ClientAccount], which
// has no JetStream and reaches the service account only through [Imports]
// of the one [ServiceExport], and receives from it, through the
// [StreamExports], the agents' replies and, for approvers, operators and
// auditors, every message of AIRLOCK_OPS (op events, rejections and
// records) as the server republishes it once stored, on airlock.v1.live.>
// ([WatchSubjects]); never the requests, nor the subjects Airlock appends
// on. NATS does not check the reply subject a client names, but a
// responder's answer to a client goes back to the client account, where
// no stream is, so no reply can put a message in a stream. Such an answer
// can still reach a watcher when the client names a live subject as its
// reply: docs/authority.md says how a watcher tells it apart.
//
// # Identity in subjects
//
// An agent submits on airlock.v1.req.<workspace>.<name>, an approver
// resolves a hold on airlock.v1.resolve.<workspace>.<name> and an operator
// controls Airlock on airlock.v1.ctl.<workspace>.<name>; the server lets a
// principal publish only under its own name, so the last token of such a
// subject is the authenticated principal; [Set.Lookup] gives its role and
// public key. An agent alone may subscribe to its replies,
// airlock.v1.reply.<name>.>.
//
// # Enforcement
//
// [Permissions] gives a role's allow and deny lists in its account
// ([Role.Account]). [Set.ServerConfig] renders both accounts, their users
// with their permissions, the exports and the imports as a nats-server
// configuration block; [Set.WriteServerConfig] writes it, the embedded
// server loads it (internal/natsrv.Config.AuthFile) and an external server
// includes it. docs/authority.md describes the model, and what it does not
// protect.
package authority
