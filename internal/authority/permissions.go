package authority

import (
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats-server/v2/server"
)

const everything = ">"

// Permissions returns the subject permissions of p in its account
// (Role.Account). The caller owns the result. The service may do
// everything in ServiceAccount. Every other role has publish allow lists
// of the Imports it uses, and, to make intent obvious, deny lists of the
// Airlock subjects it must never publish to; deny wins over allow. No role
// reaches JetStream but through the read-only Imports.
func Permissions(p Principal) *server.Permissions {
	switch p.Role {
	case RoleService:
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{everything}},
			Subscribe: &server.SubjectPermission{Allow: []string{everything}},
		}
	case RoleAgent:
		return perms(
			join([]string{events.RequestSubject("*", p.Name), queries, events.ResultQuerySubject(p.Name), discovery}, readStream(streams.Ops)),
			// An agent may not watch, so it has no use for asking whether
			// anyone does (the live feed's state).
			append(airlockWrites(events.RequestSubjects), events.QueryLiveSubject),
			inbox, events.ReplyPrefix(p.Name)+">")
	case RoleApprover:
		return perms(
			join([]string{events.ResolveSubject("*", p.Name), queries, events.ResultQuerySubject(p.Name), discovery}, readStreams()),
			airlockWrites(resolveAll),
			watch(inbox)...)
	case RoleOperator:
		return perms(
			join([]string{events.ControlSubject("*", p.Name), queries, events.ResultQuerySubject(p.Name), discovery}, readStreams()),
			airlockWrites(controlAll),
			watch(inbox)...)
	case RoleAuditor:
		return perms(
			join([]string{queries, events.ResultQuerySubject(p.Name), discovery}, readStreams()),
			airlockWrites(""),
			watch(inbox)...)
	}
	// An unknown role may do nothing.
	return perms(nil, []string{everything})
}

// watch is subs and the live op events, rejections and records
// (WatchSubjects), which every role but the agent may subscribe to.
func watch(subs ...string) []string {
	return append(subs, WatchSubjects()...)
}

func perms(pubAllow, pubDeny []string, subAllow ...string) *server.Permissions {
	p := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pubAllow, Deny: pubDeny},
		Subscribe: &server.SubjectPermission{Allow: subAllow},
	}
	if len(subAllow) == 0 {
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

// airlockWrites lists the Airlock subjects a client must not publish to,
// leaving out except, the family of its own command subject: requests,
// resolutions and controls of the other roles, the subjects only the
// service writes, and the agents' reply subjects (in ClientAccount a
// message there would reach the agent subscribed to it).
func airlockWrites(except string) []string {
	var out []string
	for _, s := range []string{
		events.RequestSubjects,
		events.OpSubjects,
		events.RejectedSubjects,
		resolveAll,
		controlAll,
		events.SysSubjects,
		replyAll,
		events.LiveSubjects,
	} {
		if s != except {
			out = append(out, s)
		}
	}
	return out
}

// readStream lets a principal read stream without a consumer: its info
// and a direct get by sequence or by last subject.
func readStream(stream string) []string {
	return []string{streamInfo(stream), directGetBody(stream), directGetLast(stream)}
}

// readStreams reads Airlock's streams (the held requests too) and the
// audit checkpoints.
func readStreams() []string {
	return join(readStream(streams.Requests), readStream(streams.Ops), readStream(streams.Held), readStream(auditStream))
}

// auditStream backs the audit checkpoint bucket.
const auditStream = "KV_" + streams.AuditBucket
