package authority

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nkeys"
)

// CredsExt ends the name of every credential file.
const CredsExt = ".creds"

// decorate renders a user seed the way nsc and jwt.DecorateSeed do.
func decorate(seed []byte) []byte {
	var b bytes.Buffer
	b.WriteString("************************* IMPORTANT *************************\n" +
		"NKEY Seed printed below can be used to sign and prove identity.\n" +
		"NKEYs are sensitive and should be treated as secrets.\n\n" +
		"-----BEGIN USER NKEY SEED-----\n")
	b.Write(seed)
	b.WriteString("\n------END USER NKEY SEED------\n\n" +
		"*************************************************************\n")
	return b.Bytes()
}

// newCreds creates a user key and returns its public key and its
// decorated seed.
func newCreds() (string, []byte, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", nil, fmt.Errorf("create nkey: %w", err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return "", nil, err
	}
	seed, err := kp.Seed()
	if err != nil {
		return "", nil, err
	}
	return pub, decorate(seed), nil
}

// readCreds reads a credential file, refusing one that is not a regular
// file or that its group or others may read, and returns its public key.
func readCreds(path string) (string, error) {
	if err := private(path, false); err != nil {
		return "", err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	defer clear(b)
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	defer kp.Wipe()
	return kp.PublicKey()
}

// private checks that path is a directory (dir) or a regular file that
// only its owner may access.
func private(path string, dir bool) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if dir && fi.Mode()&os.ModeSymlink != 0 {
		if fi, err = os.Stat(path); err != nil {
			return err
		}
	}
	switch {
	case dir && !fi.IsDir():
		return fmt.Errorf("%s: not a directory", path)
	case !dir && !fi.Mode().IsRegular():
		return fmt.Errorf("%s: not a regular file", path)
	case fi.Mode().Perm()&0o077 != 0:
		want := os.FileMode(0o600)
		if dir {
			want = 0o700
		}
		return fmt.Errorf("%s: mode %04o lets others read it; want %04o (chmod %o %s)",
			path, fi.Mode().Perm(), want, want, path)
	}
	return nil
}

// writeNew writes data to path atomically with mode 0600 and fails if
// path exists. The caller holds the directory's lock.
func writeNew(path string, data []byte) error {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%s: %w", path, os.ErrExist)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return writeFile(path, data, 0o600)
}

// writeFile replaces path atomically: a temporary file in the same
// directory, synced, then renamed over it, then the directory synced.
func writeFile(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			_ = os.Remove(tmp)
		}
	}()
	if err := f.Chmod(mode); err != nil {
		_ = f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// Seed returns the user seed ("SU...") in the credential file at path,
// with the checks readCreds makes: what a client opens its results with
// (producers.WithAgentKey). The caller should clear it after use.
func Seed(path string) ([]byte, error) {
	if err := private(path, false); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	defer clear(b)
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer kp.Wipe()
	seed, err := kp.Seed()
	if err != nil {
		return nil, err
	}
	// Seed is the key pair's own slice, which Wipe clears.
	return append([]byte(nil), seed...), nil
}
