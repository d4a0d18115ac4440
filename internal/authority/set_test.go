package authority_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var defaultNames = []string{"agent", "airlock", "approver", "auditor", "operator"}

func names(ps []authority.Principal) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func TestEnsureCreatesPrivateCredsOnce(t *testing.T) {
	data := t.TempDir()
	set, err := authority.Ensure(data)
	require.NoError(t, err)
	dir := filepath.Join(data, authority.CredsDir)
	assert.Equal(t, dir, set.Dir())

	fi, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
	ps := set.Principals()
	require.Equal(t, defaultNames, names(ps))
	roles := map[string]authority.Role{}
	for _, p := range ps {
		roles[p.Name] = p.Role
		path := set.CredsPath(p.Name)
		assert.Equal(t, filepath.Join(dir, p.Name+".creds"), path)
		fi, err := os.Stat(path)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), p.Name)
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Contains(t, string(b), "-----BEGIN USER NKEY SEED-----\nSU")
		assert.Contains(t, string(b), "------END USER NKEY SEED------")
		kp, err := nkeys.ParseDecoratedUserNKey(b)
		require.NoError(t, err)
		pub, err := kp.PublicKey()
		require.NoError(t, err)
		assert.Equal(t, p.PublicKey, pub, p.Name)
		assert.True(t, nkeys.IsValidPublicUserKey(p.PublicKey))
		// What nats.go and `nats --nkey` read.
		_, err = nats.NkeyOptionFromSeed(path)
		require.NoError(t, err)
	}
	assert.Equal(t, map[string]authority.Role{
		"airlock": authority.RoleService, "agent": authority.RoleAgent, "approver": authority.RoleApprover,
		"operator": authority.RoleOperator, "auditor": authority.RoleAuditor,
	}, roles)

	fi, err = os.Stat(filepath.Join(dir, authority.PrincipalsFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	var listed []authority.Principal
	b, err := os.ReadFile(filepath.Join(dir, authority.PrincipalsFile))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &listed))
	assert.Equal(t, ps, listed)
	assert.Contains(t, string(b), `"public_key"`)

	// A second start loads the same keys and writes nothing.
	before := snapshot(t, dir)
	again, err := authority.Ensure(data)
	require.NoError(t, err)
	assert.Equal(t, ps, again.Principals())
	assert.Equal(t, before, snapshot(t, dir))

	p, ok := again.Lookup("approver")
	require.True(t, ok)
	assert.Equal(t, authority.RoleApprover, p.Role)
	_, ok = again.Lookup("nobody")
	assert.False(t, ok)

	// Principals returns a copy.
	mine := again.Principals()
	mine[0].Name = "changed"
	assert.Equal(t, defaultNames, names(again.Principals()))
}

// snapshot maps every file of dir to its contents.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		out[e.Name()] = string(b)
	}
	return out
}

func TestEnsureRefusesLoosePermissions(t *testing.T) {
	for _, tc := range []struct {
		name string
		path string // under the creds directory; "" is the directory
		mode os.FileMode
	}{
		{name: "group-readable directory", path: "", mode: 0o750},
		{name: "world-readable directory", path: "", mode: 0o705},
		{name: "group-readable creds", path: "approver.creds", mode: 0o640},
		{name: "world-readable creds", path: "airlock.creds", mode: 0o604},
		{name: "readable principal list", path: authority.PrincipalsFile, mode: 0o644},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := t.TempDir()
			_, err := authority.Ensure(data)
			require.NoError(t, err)
			path := filepath.Join(data, authority.CredsDir, tc.path)
			require.NoError(t, os.Chmod(path, tc.mode))
			_, err = authority.Ensure(data)
			require.Error(t, err)
			assert.Contains(t, err.Error(), path)
			assert.Contains(t, err.Error(), "lets others read it")
			_, err = authority.Add(data, "approver2", authority.RoleApprover)
			require.Error(t, err)
		})
	}
}

func TestEnsureRefusesDisagreement(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(t *testing.T, dir string)
		want   string
	}{
		{
			name: "key in list differs from seed",
			break_: func(t *testing.T, dir string) {
				editList(t, dir, func(ps []authority.Principal) []authority.Principal {
					ps[0].PublicKey, ps[1].PublicKey = ps[1].PublicKey, ps[0].PublicKey
					return ps
				})
			},
			want: "holds the seed of",
		},
		{
			name: "listed creds missing",
			break_: func(t *testing.T, dir string) {
				require.NoError(t, os.Remove(filepath.Join(dir, "operator.creds")))
			},
			want: "operator.creds is missing",
		},
		{
			name: "creds not listed",
			break_: func(t *testing.T, dir string) {
				b, err := os.ReadFile(filepath.Join(dir, "approver.creds"))
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(dir, "stranger.creds"), b, 0o600))
			},
			want: "is not listed",
		},
		{
			name: "default creds not listed",
			break_: func(t *testing.T, dir string) {
				editList(t, dir, func(ps []authority.Principal) []authority.Principal {
					return slices.DeleteFunc(ps, func(p authority.Principal) bool { return p.Name == "auditor" })
				})
			},
			want: "auditor.creds is not listed",
		},
		{
			name: "not a seed",
			break_: func(t *testing.T, dir string) {
				require.NoError(t, os.WriteFile(filepath.Join(dir, "agent.creds"), []byte("hello\n"), 0o600))
			},
			want: "agent.creds",
		},
		{
			name: "default with another role",
			break_: func(t *testing.T, dir string) {
				editList(t, dir, func(ps []authority.Principal) []authority.Principal {
					for i := range ps {
						if ps[i].Name == "auditor" {
							ps[i].Role = authority.RoleApprover
						}
					}
					return ps
				})
			},
			want: "role approver, want auditor",
		},
		{
			name: "corrupt list",
			break_: func(t *testing.T, dir string) {
				require.NoError(t, os.WriteFile(filepath.Join(dir, authority.PrincipalsFile), []byte("{"), 0o600))
			},
			want: authority.PrincipalsFile,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := t.TempDir()
			_, err := authority.Ensure(data)
			require.NoError(t, err)
			dir := filepath.Join(data, authority.CredsDir)
			tc.break_(t, dir)
			before := snapshot(t, dir)
			_, err = authority.Ensure(data)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, before, snapshot(t, dir), "a refusing Ensure changes nothing")
		})
	}
}

func editList(t *testing.T, dir string, edit func([]authority.Principal) []authority.Principal) {
	t.Helper()
	path := filepath.Join(dir, authority.PrincipalsFile)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var ps []authority.Principal
	require.NoError(t, json.Unmarshal(b, &ps))
	b, err = json.Marshal(edit(ps))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o600))
}

// A first start that stopped after writing seeds and before writing the
// list resumes with the same keys.
func TestEnsureRecoversMissingList(t *testing.T) {
	data := t.TempDir()
	first, err := authority.Ensure(data)
	require.NoError(t, err)
	dir := filepath.Join(data, authority.CredsDir)
	require.NoError(t, os.Remove(filepath.Join(dir, authority.PrincipalsFile)))
	require.NoError(t, os.Remove(filepath.Join(dir, "auditor.creds")))

	again, err := authority.Ensure(data)
	require.NoError(t, err)
	for _, p := range first.Principals() {
		q, ok := again.Lookup(p.Name)
		require.True(t, ok)
		if p.Name == "auditor" {
			assert.NotEqual(t, p.PublicKey, q.PublicKey, "a lost seed gets a new key")
		} else {
			assert.Equal(t, p, q)
		}
	}
	_, err = os.Stat(filepath.Join(dir, authority.PrincipalsFile))
	assert.NoError(t, err)
}

func TestAdd(t *testing.T) {
	data := t.TempDir()
	// Add does what Ensure does first.
	p, err := authority.Add(data, "approver2", authority.RoleApprover)
	require.NoError(t, err)
	assert.Equal(t, "approver2", p.Name)
	assert.Equal(t, authority.RoleApprover, p.Role)
	assert.True(t, nkeys.IsValidPublicUserKey(p.PublicKey))

	set, err := authority.Ensure(data)
	require.NoError(t, err)
	assert.Equal(t, []string{"agent", "airlock", "approver", "approver2", "auditor", "operator"}, names(set.Principals()))
	got, ok := set.Lookup("approver2")
	require.True(t, ok)
	assert.Equal(t, p, got)
	fi, err := os.Stat(set.CredsPath("approver2"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	assert.Contains(t, set.ServerConfig(), "nkey: "+p.PublicKey)

	for _, tc := range []struct {
		name, principal string
		role            authority.Role
		want            string
	}{
		{"taken", "approver2", authority.RoleApprover, "principal exists"},
		{"default taken", "agent", authority.RoleAgent, "principal exists"},
		{"second service", "airlock2", authority.RoleService, "only airlock has role service"},
		{"service name", "airlock", authority.RoleService, "one service principal"},
		{"service name other role", "airlock", authority.RoleAgent, "only airlock has role service"},
		{"unknown role", "x", authority.Role("admin"), `unknown role "admin"`},
		{"upper case", "Approver3", authority.RoleApprover, "want [a-z0-9]"},
		{"dot", "a.b", authority.RoleApprover, "want [a-z0-9]"},
		{"wildcard", "*", authority.RoleApprover, "want [a-z0-9]"},
		{"leading dash", "-a", authority.RoleApprover, "want [a-z0-9]"},
		{"empty", "", authority.RoleApprover, "want [a-z0-9]"},
		{"too long", strings.Repeat("a", 65), authority.RoleApprover, "want [a-z0-9]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := authority.Add(data, tc.principal, tc.role)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	longest := strings.Repeat("a", 64)
	_, err = authority.Add(data, longest, authority.RoleAuditor)
	require.NoError(t, err)
	set, err = authority.Ensure(data)
	require.NoError(t, err)
	assert.Len(t, set.Principals(), 7)
}

func TestConnectOptionRefusesNonSeed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.creds")
	require.NoError(t, os.WriteFile(path, []byte("not a seed\n"), 0o600))
	_, err := authority.ConnectOption(path)
	assert.ErrorContains(t, err, path)
	_, err = authority.ConnectOption(filepath.Join(t.TempDir(), "missing.creds"))
	assert.Error(t, err)
}

// A principal added by hand, as docs/authority.md shows: a bare seed from
// `nk -gen user` and an entry in principals.json.
func TestEnsureTakesPrincipalAddedByHand(t *testing.T) {
	data := t.TempDir()
	_, err := authority.Ensure(data)
	require.NoError(t, err)
	dir := filepath.Join(data, authority.CredsDir)
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	seed, err := kp.Seed()
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "approver2.creds"), append(seed, '\n'), 0o600))
	editList(t, dir, func(ps []authority.Principal) []authority.Principal {
		return append(ps, authority.Principal{Name: "approver2", Role: authority.RoleApprover, PublicKey: pub})
	})

	set, err := authority.Ensure(data)
	require.NoError(t, err)
	p, ok := set.Lookup("approver2")
	require.True(t, ok)
	assert.Equal(t, authority.Principal{Name: "approver2", Role: authority.RoleApprover, PublicKey: pub}, p)
	_, err = authority.ConnectOption(set.CredsPath("approver2"))
	require.NoError(t, err)
}

// A principal registered by its public key, or whose creds file was
// written outside the data dir, needs no seed there; serve starts.
func TestExternalPrincipals(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	_, err := authority.Ensure(dir)
	require.NoError(t, err)

	out := filepath.Join(elsewhere, "remote-agent.creds")
	pub, err := authority.NewSeedFile(out)
	require.NoError(t, err)
	_, err = authority.NewSeedFile(out)
	require.Error(t, err, "an existing creds file is never overwritten")
	p, err := authority.AddExternal(dir, "remote-agent", authority.RoleAgent, pub)
	require.NoError(t, err)
	assert.True(t, p.External)

	s, err := authority.Ensure(dir)
	require.NoError(t, err, "the seed is elsewhere, on purpose")
	got, ok := s.Lookup("remote-agent")
	require.True(t, ok)
	assert.Equal(t, pub, got.PublicKey)
	assert.True(t, got.External)
	_, err = os.Stat(s.CredsPath("remote-agent"))
	assert.True(t, os.IsNotExist(err), "no seed in the data dir")

	_, err = authority.AddExternal(dir, "twin", authority.RoleAgent, pub)
	assert.ErrorContains(t, err, "has that key already")
	_, err = authority.AddExternal(dir, "bad", authority.RoleAgent, "SUAB")
	assert.ErrorContains(t, err, "no nkey user public key")
	_, err = authority.AddExternal(dir, "airlock2", authority.RoleService, pub)
	assert.Error(t, err)

	// A listed principal that is not external still needs its seed.
	require.NoError(t, os.Remove(s.CredsPath("approver")))
	_, err = authority.Ensure(dir)
	assert.ErrorContains(t, err, "approver.creds is missing")
}
