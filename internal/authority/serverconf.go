package authority

import (
	"fmt"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// AuthConfigFile is the name WriteServerConfig gives its file in the data
// directory by default.
const AuthConfigFile = "nats-auth.conf"

// ServerUsers returns a server user, with its Permissions, for every
// principal: the value of natsrv.Config.Users. The caller owns the result.
func (s *Set) ServerUsers() []*server.NkeyUser {
	users := make([]*server.NkeyUser, 0, len(s.principals))
	for _, p := range s.principals {
		users = append(users, &server.NkeyUser{Nkey: p.PublicKey, Permissions: Permissions(p)})
	}
	return users
}

// ServerConfig renders the nats-server configuration block that gives an
// external server the same users and permissions as ServerUsers. Include
// it from the server's configuration file.
func (s *Set) ServerConfig() string {
	var b strings.Builder
	b.WriteString("# Airlock's principals and their permissions, written by Airlock\n" +
		"# (internal/authority). Include this file from nats-server.conf.\n")
	writeAuthorization(&b, s.principals)
	return b.String()
}

// WriteServerConfig writes ServerConfig to path atomically, mode 0644: it
// holds public keys only.
func (s *Set) WriteServerConfig(path string) error {
	if err := writeFile(path, []byte(s.ServerConfig()), 0o644); err != nil {
		return fmt.Errorf("authority: write server config: %w", err)
	}
	return nil
}

func writeAuthorization(b *strings.Builder, ps []Principal) {
	b.WriteString("authorization {\n  users = [\n")
	for _, p := range ps {
		perms := Permissions(p)
		fmt.Fprintf(b, "    # %s (%s)\n    {\n      nkey: %s\n      permissions: {\n", p.Name, p.Role, p.PublicKey)
		writeSubjects(b, "publish", perms.Publish)
		writeSubjects(b, "subscribe", perms.Subscribe)
		b.WriteString("      }\n    }\n")
	}
	b.WriteString("  ]\n}\n")
}

func writeSubjects(b *strings.Builder, verb string, sp *server.SubjectPermission) {
	if sp == nil {
		return
	}
	fmt.Fprintf(b, "        %s: {\n", verb)
	writeList(b, "allow", sp.Allow)
	writeList(b, "deny", sp.Deny)
	b.WriteString("        }\n")
}

func writeList(b *strings.Builder, key string, subjects []string) {
	if len(subjects) == 0 {
		return
	}
	fmt.Fprintf(b, "          %s: [\n", key)
	for _, s := range subjects {
		fmt.Fprintf(b, "            %q\n", s)
	}
	b.WriteString("          ]\n")
}
