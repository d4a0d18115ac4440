package authority_test

import (
	"testing"

	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPermissionsInvariants(t *testing.T) {
	svc := authority.Permissions(authority.Principal{Name: "airlock", Role: authority.RoleService})
	assert.Equal(t, []string{">"}, svc.Publish.Allow)
	assert.Equal(t, []string{">"}, svc.Subscribe.Allow)
	assert.Empty(t, svc.Publish.Deny)

	for _, tc := range []struct {
		name string
		p    authority.Principal
		own  string // the one command subject it may publish, if any
	}{
		{name: "agent", p: authority.Principal{Name: "agent", Role: authority.RoleAgent}},
		{name: "approver", p: authority.Principal{Name: "ap2", Role: authority.RoleApprover}, own: "airlock.v1.resolve.*.ap2"},
		{name: "operator", p: authority.Principal{Name: "op2", Role: authority.RoleOperator}, own: "airlock.v1.ctl.*.op2"},
		{name: "auditor", p: authority.Principal{Name: "auditor", Role: authority.RoleAuditor}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			perms := authority.Permissions(tc.p)
			require.NotNil(t, perms.Publish)
			require.NotNil(t, perms.Subscribe)
			assert.Nil(t, perms.Response, "no role answers requests")
			assert.NotContains(t, perms.Publish.Allow, ">")
			assert.Contains(t, perms.Subscribe.Allow, "_INBOX.>")
			for _, s := range []string{"airlock.v1.op.>", "airlock.v1.rejected.>", "airlock.v1.sys.>",
				"$JS.API.STREAM.PURGE.>", "$JS.API.STREAM.DELETE.>", "$JS.API.STREAM.UPDATE.>", "$JS.API.STREAM.CREATE.>"} {
				assert.Contains(t, perms.Publish.Deny, s)
			}
			for _, s := range perms.Publish.Allow {
				assert.NotContains(t, perms.Publish.Deny, s, "allowed and denied")
			}
			if tc.own != "" {
				assert.Contains(t, perms.Publish.Allow, tc.own)
			}
			assert.Contains(t, perms.Publish.Allow, "airlock.v1.q.>")
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
