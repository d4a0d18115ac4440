package authority_test

import (
	"testing"

	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPermissionsInvariants(t *testing.T) {
	svc := authority.Principal{Name: "airlock", Role: authority.RoleService}
	perms := authority.Permissions(svc)
	assert.Equal(t, authority.ServiceAccount, svc.Role.Account())
	assert.Equal(t, []string{">"}, perms.Publish.Allow)
	assert.Equal(t, []string{">"}, perms.Subscribe.Allow)
	assert.Empty(t, perms.Publish.Deny)

	for _, tc := range []struct {
		name string
		p    authority.Principal
		own  string   // the one command subject it may publish, if any
		subs []string // what it may subscribe to
	}{
		{name: "agent", p: authority.Principal{Name: "ag2", Role: authority.RoleAgent},
			own: "airlock.v1.req.*.ag2", subs: []string{"_INBOX.>", "airlock.v1.reply.ag2.>"}},
		{name: "approver", p: authority.Principal{Name: "ap2", Role: authority.RoleApprover},
			own: "airlock.v1.resolve.*.ap2", subs: []string{"_INBOX.>", "airlock.v1.live.>"}},
		{name: "operator", p: authority.Principal{Name: "op2", Role: authority.RoleOperator},
			own: "airlock.v1.ctl.*.op2", subs: []string{"_INBOX.>", "airlock.v1.live.>"}},
		{name: "auditor", p: authority.Principal{Name: "auditor", Role: authority.RoleAuditor},
			subs: []string{"_INBOX.>", "airlock.v1.live.>"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, authority.ClientAccount, tc.p.Role.Account())
			perms := authority.Permissions(tc.p)
			require.NotNil(t, perms.Publish)
			require.NotNil(t, perms.Subscribe)
			assert.Nil(t, perms.Response, "no role answers requests")
			assert.NotContains(t, perms.Publish.Allow, ">")
			assert.Equal(t, tc.subs, perms.Subscribe.Allow)
			assert.Empty(t, perms.Subscribe.Deny)
			// Whatever a client may subscribe to outside its inboxes
			// arrives through a stream import, and is never a request.
			for _, s := range perms.Subscribe.Allow {
				if s != "_INBOX.>" {
					assert.True(t, streamImported(s), "%s is not imported", s)
				}
				assert.False(t, server.SubjectsCollide(s, "airlock.v1.req.>"), "%s may see requests", s)
				// Nor what is published on the stream's subjects, stored
				// or not: only what AIRLOCK_OPS republishes once stored.
				for _, stored := range []string{"airlock.v1.op.>", "airlock.v1.rejected.>", "airlock.v1.sys.>"} {
					assert.False(t, server.SubjectsCollide(s, stored), "%s may see %s unstored", s, stored)
				}
			}
			for _, s := range []string{"airlock.v1.op.>", "airlock.v1.rejected.>", "airlock.v1.sys.>", "airlock.v1.reply.>", "airlock.v1.live.>"} {
				assert.Contains(t, perms.Publish.Deny, s)
			}
			for _, s := range perms.Publish.Allow {
				for _, d := range perms.Publish.Deny {
					assert.False(t, server.SubjectMatchesFilter(s, d), "%s allowed and denied by %s", s, d)
				}
				// Whatever a client may publish leads through a service
				// import: nothing it publishes stays in its account.
				assert.True(t, imported(s), "%s is not imported", s)
			}
			if tc.own != "" {
				assert.Contains(t, perms.Publish.Allow, tc.own)
			}
			assert.Contains(t, perms.Publish.Allow, "airlock.v1.q.>")
			// Results are asked for under one's own name only: the name
			// is who asks, and only an op's agent gets its result.
			assert.Contains(t, perms.Publish.Allow, "airlock.v1.fetch."+tc.p.Name)
			for _, s := range perms.Publish.Allow {
				assert.False(t, server.SubjectMatchesFilter("airlock.v1.fetch.someone-else", s), "%s may ask for another's results", s)
				// Nothing a client publishes lands in AIRLOCK_RESULTS.
				assert.False(t, server.SubjectsCollide(s, "airlock.v1.result.>"), "%s may write results", s)
			}
			assert.Contains(t, perms.Publish.Allow, "$SRV.>")
			assert.Contains(t, perms.Publish.Allow, "$JS.API.DIRECT.GET.AIRLOCK_OPS.>")
			// Each call returns its own lists.
			perms.Publish.Allow[0] = "changed"
			assert.NotEqual(t, "changed", authority.Permissions(tc.p).Publish.Allow[0])
		})
	}

	none := authority.Permissions(authority.Principal{Name: "x", Role: authority.Role("admin")})
	assert.Empty(t, none.Publish.Allow)
	assert.Equal(t, []string{">"}, none.Publish.Deny)
	assert.Equal(t, []string{">"}, none.Subscribe.Deny)
}

func imported(subject string) bool {
	for _, im := range authority.Imports() {
		if !im.Stream && server.SubjectMatchesFilter(subject, im.Subject) {
			return true
		}
	}
	return false
}

func streamImported(subject string) bool {
	for _, im := range authority.Imports() {
		if im.Stream && server.SubjectMatchesFilter(subject, im.Subject) {
			return true
		}
	}
	return false
}

func TestImports(t *testing.T) {
	seen := map[string]bool{}
	var streams []string
	for _, im := range authority.Imports() {
		assert.True(t, server.IsValidSubject(im.Subject), im.Subject)
		assert.False(t, seen[im.Subject], "%s imported twice", im.Subject)
		seen[im.Subject] = true
		assert.NotEmpty(t, im.Why)
		// The one service export covers every service import; each
		// stream import is a stream export.
		if im.Stream {
			assert.Contains(t, authority.StreamExports(), im.Subject)
			streams = append(streams, im.Subject)
		} else {
			assert.True(t, server.SubjectMatchesFilter(im.Subject, authority.ServiceExport), im.Subject)
		}
	}
	assert.Equal(t, []string{"airlock.v1.reply.>", "airlock.v1.live.>"}, streams)
	assert.Equal(t, authority.StreamExports(), streams)
	assert.Equal(t, streams[1:], authority.WatchSubjects())
	// No service import writes to a stream other than the requests, and
	// no JetStream API but reads; no stream import carries requests.
	for _, im := range authority.Imports() {
		s := im.Subject
		if im.Stream {
			assert.False(t, server.SubjectsCollide(s, "airlock.v1.req.>"), "%s streams requests", s)
			continue
		}
		for _, stored := range []string{"airlock.v1.op.>", "airlock.v1.rejected.>", "airlock.v1.sys.>"} {
			assert.False(t, server.SubjectsCollide(s, stored), "%s reaches %s", s, stored)
		}
		for _, write := range []string{"$JS.API.STREAM.DELETE.AIRLOCK_OPS", "$JS.API.CONSUMER.CREATE.AIRLOCK_OPS", "$JS.ACK.AIRLOCK_OPS.x"} {
			assert.False(t, server.SubjectMatchesFilter(write, s), "%s imports %s", s, write)
		}
	}
}
