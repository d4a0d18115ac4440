package authority

import (
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/streams"
)

// The two NATS accounts. The service principal and the streams live in
// ServiceAccount; every other principal lives in ClientAccount, which has
// no JetStream and reaches ServiceAccount only through Imports. A message
// published in ClientAccount is never stored, so no client can make a
// responder put its answer on a stream subject by naming that subject as
// the reply: the answer goes back to ClientAccount, where no stream is.
const (
	// ServiceAccount holds the service principal and, with JetStream
	// enabled, AIRLOCK_REQUESTS and AIRLOCK_OPS.
	ServiceAccount = "AIRLOCK"
	// ClientAccount holds the agents, approvers, operators and auditors.
	ClientAccount = "CLIENTS"
)

// Account returns the account of a principal of role r: ServiceAccount
// for RoleService, ClientAccount for every other role.
func (r Role) Account() string {
	if r == RoleService {
		return ServiceAccount
	}
	return ClientAccount
}

// Import is a subject ClientAccount imports from ServiceAccount, under the
// same name.
type Import struct {
	// Subject is the subject, wildcards allowed.
	Subject string
	// Stream is true for a stream import: ServiceAccount publishes and
	// clients subscribe. Otherwise it is a service import: clients send
	// requests, which a responder in ServiceAccount (Airlock, JetStream,
	// a micro service) answers through the import.
	Stream bool
	// Why says what the import is for; ServerConfig writes it as a
	// comment.
	Why string
}

// ServiceExport is the one service export of ServiceAccount, to
// ClientAccount only; what ClientAccount may reach of it is the service
// Imports. One export rather than one per import, because the server drops
// a message that passes through the same export twice: an answer that a
// client points, by its reply subject, at another imported subject (a JS
// API answer sent to airlock.v1.req.<ws>.<agent>, say) is dropped instead
// of entering ServiceAccount as a new request. Its response type is
// "stream" because micro discovery ($SRV.PING) expects one answer from
// each service instance.
const ServiceExport = ">"

// StreamExports are the stream exports of ServiceAccount, to
// ClientAccount only: the agents' replies, and every message of
// AIRLOCK_OPS as the server republishes it once stored (op events,
// rejections and records, watched live by approvers, operators and
// auditors). Never the requests, which carry argument plaintext. The
// caller owns the slice.
func StreamExports() []string { return []string{replyAll, events.LiveSubjects} }

// Subjects of the imports and permissions.
const (
	inbox     = "_INBOX.>" // replies: nats.go request inboxes
	discovery = "$SRV.>"   // micro service discovery: PING, INFO, STATS
	jsAPI     = "$JS.API." // JetStream API prefix
	// replyAll matches every agent's reply subjects,
	// airlock.v1.reply.<agent>.<token...> (events.ReplyPrefix).
	replyAll = events.SubjectRoot + ".reply.>"
	// Every resolution and control, whatever its principal.
	resolveAll = events.SubjectRoot + ".resolve.>"
	controlAll = events.SubjectRoot + ".ctl.>"
	queries    = events.QueryPrefix + ".>"
)

// Imports returns what ClientAccount imports from ServiceAccount, in the
// order ServerConfig writes them, in a slice the caller owns.
func Imports() []Import {
	ims := []Import{
		{Subject: events.RequestSubjects, Why: "agents submit requests; JetStream stores them in AIRLOCK_REQUESTS and answers with a PubAck"},
		{Subject: queries, Why: "the query service"},
		{Subject: events.ResultQuerySubjects, Why: "results: each principal asks on its own name, and only the agent that asked for an op gets its result"},
		{Subject: resolveAll, Why: "approvers resolve holds"},
		{Subject: controlAll, Why: "operators send controls"},
	}
	for _, s := range []string{streams.Ops, streams.Requests, streams.Held, auditStream} {
		ims = append(ims,
			Import{Subject: streamInfo(s), Why: s + "'s info, which the JetStream client reads before a direct get"},
			Import{Subject: directGetBody(s), Why: "direct get from " + s + " by sequence"},
			Import{Subject: directGetLast(s), Why: "direct get of the last message of a subject in " + s})
	}
	return append(ims,
		Import{Subject: discovery, Why: "micro service discovery"},
		// A server with JetStream gives every account without it an
		// import of all of $JS.API from the system account, which answers
		// "JetStream not enabled", unless the account imports
		// $JS.API.INFO itself. No client may publish it.
		Import{Subject: jsAPI + "INFO", Why: "keeps the server from answering CLIENTS' JetStream API itself; no client may publish it"},
		Import{Subject: replyAll, Stream: true, Why: "Airlock's answers to an agent's requests, on the request's Airlock-Reply-To"},
		Import{Subject: events.LiveSubjects, Stream: true, Why: "every AIRLOCK_OPS message as stored, republished, for watching (airlock watch): op events, rejections, records; digests, never args or results"},
	)
}

// WatchSubjects are the stream Imports that approvers, operators and
// auditors may subscribe to: every message of AIRLOCK_OPS (op events,
// rejections and records) as the server republishes it once stored. None
// carries argument or output plaintext. Agents may not: an agent sees its
// own replies only. The caller owns the slice.
func WatchSubjects() []string { return []string{events.LiveSubjects} }

func streamInfo(stream string) string    { return jsAPI + "STREAM.INFO." + stream }
func directGetBody(stream string) string { return jsAPI + "DIRECT.GET." + stream }
func directGetLast(stream string) string { return jsAPI + "DIRECT.GET." + stream + ".>" }
