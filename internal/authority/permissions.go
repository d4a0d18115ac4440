package authority

import (
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats-server/v2/server"
)

// Subject spaces the roles share.
const (
	inbox      = "_INBOX.>"  // replies: nats.go request inboxes
	discovery  = "$SRV.>"    // micro service discovery: PING, INFO, STATS
	jsAPI      = "$JS.API."  // JetStream API prefix
	jsAck      = "$JS.ACK.>" // acknowledgements of consumer deliveries
	everything = ">"
	// Every resolution and control, whatever its principal.
	resolveAll = events.SubjectRoot + ".resolve.>"
	controlAll = events.SubjectRoot + ".ctl.>"
)

// Permissions returns the subject permissions of p. The caller owns the
// result. Every role but the service has allow lists and, to make intent
// obvious, deny lists of the subjects it must never publish to; deny wins
// over allow.
func Permissions(p Principal) *server.Permissions {
	switch p.Role {
	case RoleService:
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{everything}},
			Subscribe: &server.SubjectPermission{Allow: []string{everything}},
		}
	case RoleAgent:
		return perms(
			join([]string{events.SubjectRoot + ".req.*", events.QueryPrefix + ".>", discovery},
				streamInfo(streams.Ops), directGet(streams.Ops)),
			join(airlockWrites(events.RequestSubjects), jsWrites()),
			inbox)
	case RoleApprover:
		return perms(
			join([]string{events.ResolveSubject("*", p.Name), events.QueryPrefix + ".>", discovery},
				readStreams()),
			join(airlockWrites(resolveAll), jsWrites()),
			inbox)
	case RoleOperator:
		return perms(
			join([]string{events.ControlSubject("*", p.Name), events.QueryPrefix + ".>", discovery},
				readStreams()),
			join(airlockWrites(controlAll), jsWrites()),
			inbox)
	case RoleAuditor:
		allow := []string{events.QueryPrefix + ".>", discovery,
			jsAPI + "INFO", jsAPI + "STREAM.NAMES", jsAPI + "STREAM.LIST"}
		for _, s := range []string{streams.Requests, streams.Ops} {
			allow = join(allow, streamInfo(s), directGet(s), []string{
				jsAPI + "STREAM.MSG.GET." + s,
				jsAPI + "CONSUMER.CREATE." + s + ".>",
				jsAPI + "CONSUMER.INFO." + s + ".*",
				jsAPI + "CONSUMER.DELETE." + s + ".*",
				jsAPI + "CONSUMER.MSG.NEXT." + s + ".*",
			})
		}
		deny := join(airlockWrites(""), jsWrites(), []string{jsAck})
		for _, d := range airlockDurables {
			c := d.stream + "." + d.consumer
			deny = append(deny, jsAPI+"CONSUMER.CREATE."+c, jsAPI+"CONSUMER.CREATE."+c+".>",
				jsAPI+"CONSUMER.DELETE."+c, jsAPI+"CONSUMER.MSG.NEXT."+c)
		}
		return perms(allow, deny, inbox, events.SubjectRoot+".>")
	}
	// An unknown role may do nothing.
	return perms(nil, []string{everything}, "")
}

// airlockDurables are the durable consumers of fixed name that Airlock
// itself works through: an auditor may not replace, delete or pull from
// them. (The executors' consumers are named after their tools, which this
// package does not know.)
var airlockDurables = []struct{ stream, consumer string }{
	{streams.Requests, streams.GateConsumer},
	{streams.Ops, streams.ResumeConsumer},
}

func perms(pubAllow, pubDeny []string, subAllow ...string) *server.Permissions {
	p := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pubAllow, Deny: pubDeny},
		Subscribe: &server.SubjectPermission{},
	}
	for _, s := range subAllow {
		if s != "" {
			p.Subscribe.Allow = append(p.Subscribe.Allow, s)
		}
	}
	if len(p.Subscribe.Allow) == 0 {
		p.Subscribe.Deny = []string{everything}
	}
	return p
}

func join(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// airlockWrites lists the Airlock subjects only the service publishes to
// (and the request, resolve and control subjects, each role but its own),
// leaving out except.
func airlockWrites(except string) []string {
	var out []string
	for _, s := range []string{
		events.RequestSubjects,
		events.OpSubjects,
		events.RejectedSubjects,
		resolveAll,
		controlAll,
		events.SysSubjects,
	} {
		if s != except {
			out = append(out, s)
		}
	}
	return out
}

// jsWrites lists the JetStream API subjects that create, change, delete or
// purge streams and consumers, or touch the account or the cluster.
func jsWrites() []string {
	return []string{
		jsAPI + "STREAM.CREATE.>",
		jsAPI + "STREAM.UPDATE.>",
		jsAPI + "STREAM.DELETE.>",
		jsAPI + "STREAM.PURGE.>",
		jsAPI + "STREAM.MSG.DELETE.>",
		jsAPI + "STREAM.SNAPSHOT.>",
		jsAPI + "STREAM.RESTORE.>",
		jsAPI + "STREAM.PEER.>",
		jsAPI + "STREAM.LEADER.>",
		jsAPI + "CONSUMER.DURABLE.>",
		jsAPI + "CONSUMER.PAUSE.>",
		jsAPI + "CONSUMER.UNPIN.>",
		jsAPI + "CONSUMER.RESET.>",
		jsAPI + "CONSUMER.PEER.>",
		jsAPI + "CONSUMER.LEADER.>",
		jsAPI + "ACCOUNT.>",
		jsAPI + "META.>",
		jsAPI + "SERVER.>",
	}
}

func streamInfo(stream string) []string { return []string{jsAPI + "STREAM.INFO." + stream} }

// directGet allows both forms of a direct get: by request body, and the
// last message of a subject named in the API subject itself.
func directGet(stream string) []string {
	return []string{jsAPI + "DIRECT.GET." + stream, jsAPI + "DIRECT.GET." + stream + ".>"}
}

// readStreams lets a principal read both of Airlock's streams without a
// consumer.
func readStreams() []string {
	return join(streamInfo(streams.Requests), directGet(streams.Requests),
		streamInfo(streams.Ops), directGet(streams.Ops))
}
