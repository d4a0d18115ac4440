package authority

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlock-dev/airlock/internal/seal"
	"github.com/nats-io/nkeys"
)

// Files in the data directory.
const (
	// CredsDir is the directory, under the data directory, of the
	// credential files and the principal list.
	CredsDir = "creds"
	// PrincipalsFile lists every principal, in CredsDir.
	PrincipalsFile = "principals.json"
)

// Set is the principals of one data directory. It does not change after
// Ensure returns it and is safe for concurrent use; Add changes the
// directory, not a Set already loaded.
type Set struct {
	dir        string      // the creds directory
	principals []Principal // sorted by name
}

// Ensure loads the principals of dataDir, creating the creds directory, a
// key for every default principal that has none, and principals.json, on
// first start. It never replaces an existing key. It refuses a creds
// directory or file that its group or others may access, a file that is no
// user seed, and a principals.json that disagrees with the seeds: a
// mismatch means someone changed a key, which only the operator can
// settle.
func Ensure(dataDir string) (*Set, error) {
	var s *Set
	err := locked(dataDir, func(dir string) error {
		var err error
		s, err = load(dir)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("authority: %w", err)
	}
	return s, nil
}

// Add creates principal name with role in dataDir, first doing what Ensure
// does, and returns it. A running server learns of it when it is started
// again with the new Set. The name must be free; role may be any but
// RoleService.
func Add(dataDir, name string, role Role) (Principal, error) {
	p := Principal{Name: name, Role: role}
	if err := p.validate(); err != nil {
		return Principal{}, fmt.Errorf("authority: add: %w", err)
	}
	if role == RoleService {
		return Principal{}, fmt.Errorf("authority: add %s: there is one %s principal, %s", name, RoleService, ServiceName)
	}
	err := locked(dataDir, func(dir string) error {
		s, err := load(dir)
		if err != nil {
			return err
		}
		if _, ok := s.Lookup(name); ok {
			return fmt.Errorf("add %s: principal exists", name)
		}
		if err := create(dir, &p); err != nil {
			return err
		}
		return writePrincipals(dir, append(s.Principals(), p))
	})
	if err != nil {
		return Principal{}, fmt.Errorf("authority: %w", err)
	}
	return p, nil
}

// AddExternal registers principal name with role and the nkey user
// public key pub, whose seed is kept outside the data dir (made by the
// principal's owner, with "nk -gen user" or "airlock creds add --out"):
// the data dir never holds it. role may be any but RoleService.
func AddExternal(dataDir, name string, role Role, pub string) (Principal, error) {
	p := Principal{Name: name, Role: role, PublicKey: pub, External: true}
	if err := p.validate(); err != nil {
		return Principal{}, fmt.Errorf("authority: add: %w", err)
	}
	if role == RoleService {
		return Principal{}, fmt.Errorf("authority: add %s: there is one %s principal, %s", name, RoleService, ServiceName)
	}
	if !nkeys.IsValidPublicUserKey(pub) {
		return Principal{}, fmt.Errorf("authority: add %s: %q is no nkey user public key (U...)", name, pub)
	}
	if _, err := seal.Recipient(pub); err != nil {
		// Results are sealed to an agent's key: one nothing can be
		// sealed to would keep its ops out of completed.
		return Principal{}, fmt.Errorf("authority: add %s: %w", name, err)
	}
	err := locked(dataDir, func(dir string) error {
		s, err := load(dir)
		if err != nil {
			return err
		}
		if _, ok := s.Lookup(name); ok {
			return fmt.Errorf("add %s: principal exists", name)
		}
		for _, q := range s.principals {
			if q.PublicKey == pub {
				return fmt.Errorf("add %s: principal %s has that key already", name, q.Name)
			}
		}
		return writePrincipals(dir, append(s.Principals(), p))
	})
	if err != nil {
		return Principal{}, fmt.Errorf("authority: %w", err)
	}
	return p, nil
}

// NewSeedFile writes a new user seed, as a creds file, to path (which
// must not exist; mode 0600) and returns its public key: a credential
// made for AddExternal, never stored in a data dir.
func NewSeedFile(path string) (string, error) {
	pub, creds, err := newCreds()
	if err != nil {
		return "", err
	}
	defer clear(creds)
	if err := writeNew(path, creds); err != nil {
		return "", err
	}
	return pub, nil
}

// Lookup returns the principal called name.
func (s *Set) Lookup(name string) (Principal, bool) {
	i, ok := slices.BinarySearchFunc(s.principals, name, func(p Principal, n string) int {
		return strings.Compare(p.Name, n)
	})
	if !ok {
		return Principal{}, false
	}
	return s.principals[i], true
}

// Principals returns every principal, sorted by name, in a slice the
// caller owns.
func (s *Set) Principals() []Principal { return slices.Clone(s.principals) }

// Dir is the directory of the credential files.
func (s *Set) Dir() string { return s.dir }

// CredsPath is the path of name's credential file, whether or not name is
// a principal.
func (s *Set) CredsPath(name string) string { return filepath.Join(s.dir, name+CredsExt) }

// load reads the creds directory dir, creating what is missing, under its
// lock.
func load(dir string) (*Set, error) {
	listed, haveList, err := readPrincipals(dir)
	if err != nil {
		return nil, err
	}
	keys, err := readAllCreds(dir)
	if err != nil {
		return nil, err
	}
	byName := map[string]Principal{}
	for _, p := range listed {
		key, ok := keys[p.Name]
		switch {
		case !ok && p.External:
			// Its seed is kept elsewhere, on purpose.
		case !ok:
			return nil, fmt.Errorf("%s lists %s but %s is missing; restore it from a backup, or remove %s from the list to drop the principal",
				PrincipalsFile, p.Name, p.Name+CredsExt, p.Name)
		case key != p.PublicKey:
			return nil, fmt.Errorf("%s says %s has key %s but %s holds the seed of %s",
				PrincipalsFile, p.Name, p.PublicKey, p.Name+CredsExt, key)
		}
		byName[p.Name] = p
	}
	changed := !haveList
	for name, key := range keys {
		if _, ok := byName[name]; ok {
			continue
		}
		// With no list at all, a default's file is from a first start
		// that stopped before writing the list: its role is known.
		role, isDefault := defaultRole(name)
		if haveList || !isDefault {
			return nil, fmt.Errorf("%s is not listed in %s: add it to the list with its role, or remove the file",
				filepath.Join(dir, name+CredsExt), PrincipalsFile)
		}
		byName[name] = Principal{Name: name, Role: role, PublicKey: key}
		changed = true
	}
	for _, d := range defaults {
		if _, ok := byName[d.Name]; ok {
			continue
		}
		p := d
		if err := create(dir, &p); err != nil {
			return nil, err
		}
		byName[p.Name] = p
		changed = true
	}
	s := &Set{dir: dir}
	for _, p := range byName {
		s.principals = append(s.principals, p)
	}
	slices.SortFunc(s.principals, func(a, b Principal) int { return strings.Compare(a.Name, b.Name) })
	if changed {
		if err := writePrincipals(dir, s.principals); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// create writes a new key for p and sets p.PublicKey.
func create(dir string, p *Principal) error {
	pub, creds, err := newCreds()
	if err != nil {
		return err
	}
	defer clear(creds)
	if err := writeNew(filepath.Join(dir, p.Name+CredsExt), creds); err != nil {
		return fmt.Errorf("write creds of %s: %w", p.Name, err)
	}
	p.PublicKey = pub
	return nil
}

// readAllCreds returns the public key of every credential file in dir, by
// principal name.
func readAllCreds(dir string) (map[string]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	keys := map[string]string{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), CredsExt)
		if !ok || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if !ValidName(name) {
			return nil, fmt.Errorf("%s: %q is no principal name", filepath.Join(dir, e.Name()), name)
		}
		key, err := readCreds(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		keys[name] = key
	}
	return keys, nil
}

// readPrincipals reads and checks principals.json; ok is false when there
// is none.
func readPrincipals(dir string) (ps []Principal, ok bool, err error) {
	path := filepath.Join(dir, PrincipalsFile)
	if err := private(path, false); errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	} else if err != nil {
		return nil, false, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false, err
	}
	if err := json.Unmarshal(b, &ps); err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	seen := map[string]bool{}
	for _, p := range ps {
		if err := p.validate(); err != nil {
			return nil, false, fmt.Errorf("%s: %w", path, err)
		}
		if !nkeys.IsValidPublicUserKey(p.PublicKey) {
			return nil, false, fmt.Errorf("%s: principal %s: %q is no nkey user public key", path, p.Name, p.PublicKey)
		}
		if seen[p.Name] {
			return nil, false, fmt.Errorf("%s: principal %s listed twice", path, p.Name)
		}
		seen[p.Name] = true
	}
	return ps, true, nil
}

func writePrincipals(dir string, ps []Principal) error {
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b Principal) int { return strings.Compare(a.Name, b.Name) })
	b, err := json.MarshalIndent(ps, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, PrincipalsFile), append(b, '\n'), 0o600)
}

// locked runs fn on the creds directory of dataDir, creating it, while
// holding its lock, so that processes sharing the data directory do not
// race to create keys.
func locked(dataDir string, fn func(dir string) error) error {
	if dataDir == "" {
		return errors.New("empty data directory")
	}
	dir := filepath.Join(dataDir, CredsDir)
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err == nil {
		// The umask cannot widen 0700, but say it outright.
		if err := os.Chmod(dir, 0o700); err != nil {
			return err
		}
	} else if !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := private(dir, true); err != nil {
		return err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return fmt.Errorf("lock %s: %w", dir, err)
	}
	defer unlock()
	return fn(dir)
}
