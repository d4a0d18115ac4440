package authority

import (
	"fmt"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// AuthConfigFile is the name WriteServerConfig gives its file in the data
// directory by default.
const AuthConfigFile = "nats-auth.conf"

// ServerConfig renders the nats-server configuration block of Airlock's
// two accounts: ServiceAccount, with JetStream, the service principal and
// the exports; ClientAccount, with every other principal and the Imports.
// Each principal is an nkey user with its Permissions. The embedded server
// loads it (internal/natsrv.Config.AuthFile) and an external server
// includes it from its configuration file, so both enforce the same text.
func (s *Set) ServerConfig() string {
	var b strings.Builder
	b.WriteString("# Airlock's NATS accounts, principals and permissions, written by\n" +
		"# Airlock (internal/authority) from creds/principals.json at every start\n" +
		"# of `airlock serve`: edit the principals, not this file. An external\n" +
		"# server includes it from its nats-server.conf; docs/authority.md\n" +
		"# explains it.\n")
	fmt.Fprintf(&b, "accounts {\n  # Airlock itself and its streams.\n  %s {\n    jetstream: enabled\n", ServiceAccount)
	writeUsers(&b, s.principals, ServiceAccount)
	b.WriteString("    exports: [\n")
	b.WriteString("      # Every service import of " + ClientAccount + ", through one export: a reply\n" +
		"      # that would pass through it twice is dropped (authority.ServiceExport).\n")
	fmt.Fprintf(&b, "      { service: %q, accounts: [%s], response_type: stream }\n", ServiceExport, ClientAccount)
	b.WriteString("      # What " + ClientAccount + " may receive: replies, and AIRLOCK_OPS as\n" +
		"      # stored; never the requests (authority.StreamExports).\n")
	for _, e := range StreamExports() {
		fmt.Fprintf(&b, "      { stream: %q, accounts: [%s] }\n", e, ClientAccount)
	}
	b.WriteString("    ]\n  }\n")
	fmt.Fprintf(&b, "  # Agents, approvers, operators and auditors. No JetStream: a message\n"+
		"  # published here is never stored.\n  %s {\n", ClientAccount)
	writeUsers(&b, s.principals, ClientAccount)
	b.WriteString("    imports: [\n")
	for _, im := range Imports() {
		kind := "service"
		if im.Stream {
			kind = "stream"
		}
		fmt.Fprintf(&b, "      # %s\n      { %s: { account: %s, subject: %q } }\n", im.Why, kind, ServiceAccount, im.Subject)
	}
	b.WriteString("    ]\n  }\n}\n")
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

// writeUsers writes the users block of the principals in account.
func writeUsers(b *strings.Builder, ps []Principal, account string) {
	b.WriteString("    users: [\n")
	for _, p := range ps {
		if p.Role.Account() != account {
			continue
		}
		perms := Permissions(p)
		fmt.Fprintf(b, "      # %s (%s)\n      {\n        nkey: %s\n        permissions: {\n", p.Name, p.Role, p.PublicKey)
		writeSubjects(b, "publish", perms.Publish)
		writeSubjects(b, "subscribe", perms.Subscribe)
		b.WriteString("        }\n      }\n")
	}
	b.WriteString("    ]\n")
}

func writeSubjects(b *strings.Builder, verb string, sp *server.SubjectPermission) {
	if sp == nil {
		return
	}
	fmt.Fprintf(b, "          %s: {\n", verb)
	writeList(b, "allow", sp.Allow)
	writeList(b, "deny", sp.Deny)
	b.WriteString("          }\n")
}

func writeList(b *strings.Builder, key string, subjects []string) {
	if len(subjects) == 0 {
		return
	}
	fmt.Fprintf(b, "            %s: [\n", key)
	for _, s := range subjects {
		fmt.Fprintf(b, "              %q\n", s)
	}
	b.WriteString("            ]\n")
}
