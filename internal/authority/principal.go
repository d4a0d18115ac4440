package authority

import (
	"fmt"
	"regexp"
)

// Role says what a principal may do; Permissions turns it into subject
// permissions.
type Role string

// Roles.
const (
	// RoleService is Airlock itself: it may do everything. Exactly one
	// principal, ServiceName, has it.
	RoleService Role = "service"
	// RoleAgent submits requests and waits for their outcome.
	RoleAgent Role = "agent"
	// RoleApprover resolves holds under its own name.
	RoleApprover Role = "approver"
	// RoleOperator sends control commands under its own name.
	RoleOperator Role = "operator"
	// RoleAuditor reads everything and writes nothing.
	RoleAuditor Role = "auditor"
)

// Valid reports whether r is one of the roles above.
func (r Role) Valid() bool {
	switch r {
	case RoleService, RoleAgent, RoleApprover, RoleOperator, RoleAuditor:
		return true
	}
	return false
}

// ServiceName is the name of the one principal with RoleService.
const ServiceName = "airlock"

// Principal is a named holder of one nkey.
type Principal struct {
	Name string `json:"name"`
	Role Role   `json:"role"`
	// PublicKey is the nkey user public key ("U..."), what the server
	// authenticates.
	PublicKey string `json:"public_key"`
	// External says that the principal's seed is not kept in this data
	// dir: it was made elsewhere (AddExternal) or written out of it. An
	// agent's results are sealed to its key, so an agent whose seed is
	// only with the agent has results nobody with the data dir can open.
	External bool `json:"external,omitempty"`
}

// defaults are the principals every data directory has, by name.
var defaults = []Principal{
	{Name: ServiceName, Role: RoleService},
	{Name: "agent", Role: RoleAgent},
	{Name: "approver", Role: RoleApprover},
	{Name: "operator", Role: RoleOperator},
	{Name: "auditor", Role: RoleAuditor},
}

func defaultRole(name string) (Role, bool) {
	for _, d := range defaults {
		if d.Name == name {
			return d.Role, true
		}
	}
	return "", false
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// ValidName reports whether name can name a principal: a lowercase letter
// or digit, then up to 63 lowercase letters, digits, '_' or '-'. Such a
// name is one subject token.
func ValidName(name string) bool { return nameRE.MatchString(name) }

func (p Principal) validate() error {
	if !ValidName(p.Name) {
		return fmt.Errorf("principal name %q: want [a-z0-9][a-z0-9_-]{0,63}", p.Name)
	}
	if !p.Role.Valid() {
		return fmt.Errorf("principal %s: unknown role %q", p.Name, p.Role)
	}
	if (p.Role == RoleService) != (p.Name == ServiceName) {
		return fmt.Errorf("principal %s: only %s has role %s", p.Name, ServiceName, RoleService)
	}
	if r, ok := defaultRole(p.Name); ok && r != p.Role {
		return fmt.Errorf("principal %s: role %s, want %s", p.Name, p.Role, r)
	}
	return nil
}
