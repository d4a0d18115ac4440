package audit

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// Files of the audit key in a data dir.
const (
	// KeyFile holds the signing key (signed-note private key format, 0600).
	KeyFile = "audit.key"
	// PubFile holds the verifier key (signed-note verifier format): give
	// it to whoever checks proofs and checkpoints.
	PubFile = "audit.pub"
	// OriginPrefix starts every log's origin; a random id follows, so each
	// deployment's log has its own.
	OriginPrefix = "airlock.dev/log/"
)

// MaxCheckpointBytes bounds a checkpoint note read from anywhere.
const MaxCheckpointBytes = 4 << 10

// Key signs a log's checkpoints. It is the audit key only: never a NATS
// credential key, which signs nonces the server chooses.
type Key struct {
	Origin   string
	Signer   note.Signer
	Verifier note.Verifier
	// Public is the verifier key in signed-note format (audit.pub).
	Public string
}

// LoadOrCreateKey reads the audit key of dir, creating it (with a new
// origin) when dir has none. created reports a new key.
func LoadOrCreateKey(dir string) (k *Key, created bool, err error) {
	k, err = LoadKey(dir)
	if errors.Is(err, os.ErrNotExist) {
		// Only when both halves are gone: a lone key or verifier is a
		// damaged dir, and a new key would orphan every checkpoint.
		_, kerr := os.Stat(filepath.Join(dir, KeyFile))
		_, perr := os.Stat(filepath.Join(dir, PubFile))
		if errors.Is(kerr, os.ErrNotExist) && errors.Is(perr, os.ErrNotExist) {
			return createKey(dir)
		}
		return nil, false, fmt.Errorf("%w (restore both %s and %s, or remove both to start a new log)", err, KeyFile, PubFile)
	}
	return k, false, err
}

// LoadKey reads the audit key of dir.
func LoadKey(dir string) (*Key, error) {
	sk, err := os.ReadFile(filepath.Join(dir, KeyFile))
	if err != nil {
		return nil, fmt.Errorf("audit key: %w", err)
	}
	pub, err := os.ReadFile(filepath.Join(dir, PubFile))
	if err != nil {
		return nil, fmt.Errorf("audit key: %w", err)
	}
	// Which file does not parse is what an operator needs to know.
	if _, err := note.NewSigner(strings.TrimSpace(string(sk))); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnreadable, filepath.Join(dir, KeyFile), err)
	}
	if _, err := note.NewVerifier(strings.TrimSpace(string(pub))); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnreadable, filepath.Join(dir, PubFile), err)
	}
	k, err := ParseKey(strings.TrimSpace(string(sk)), strings.TrimSpace(string(pub)))
	if err != nil {
		return nil, fmt.Errorf("%w: %s and %s: %v", ErrUnreadable, filepath.Join(dir, KeyFile), filepath.Join(dir, PubFile), err)
	}
	return k, nil
}

func createKey(dir string) (*Key, bool, error) {
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, false, err
	}
	origin := OriginPrefix + hex.EncodeToString(id[:])
	sk, vk, err := note.GenerateKey(rand.Reader, origin)
	if err != nil {
		return nil, false, fmt.Errorf("audit key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, err
	}
	// The public half first: a key file without its verifier is useless,
	// a verifier without its key is only rewritten.
	if err := writeFile(filepath.Join(dir, PubFile), vk+"\n", 0o644); err != nil {
		return nil, false, err
	}
	if err := writeFile(filepath.Join(dir, KeyFile), sk+"\n", 0o600); err != nil {
		return nil, false, err
	}
	k, err := ParseKey(sk, vk)
	return k, true, err
}

func writeFile(path, data string, mode os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ParseKey pairs a signing key with its verifier key.
func ParseKey(skey, vkey string) (*Key, error) {
	s, err := note.NewSigner(skey)
	if err != nil {
		return nil, fmt.Errorf("audit key: %w", err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, fmt.Errorf("audit verifier key: %w", err)
	}
	if s.Name() != v.Name() || s.KeyHash() != v.KeyHash() {
		return nil, errors.New("audit key: the signing and verifier keys are not a pair")
	}
	if !strings.HasPrefix(s.Name(), OriginPrefix) {
		return nil, fmt.Errorf("audit key: name %q is not an Airlock log origin", s.Name())
	}
	return &Key{Origin: s.Name(), Signer: s, Verifier: v, Public: vkey}, nil
}

// ReadVerifier reads a verifier key file (audit.pub). One that does not
// parse is ErrUnreadable.
func ReadVerifier(path string) (note.Verifier, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("audit verifier key: %w", err)
	}
	v, err := note.NewVerifier(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("%w: verifier key %s: %v", ErrUnreadable, path, err)
	}
	return v, nil
}

// Checkpoint is a signed statement of the log's size and root (C2SP
// tlog-checkpoint).
type Checkpoint struct {
	Origin string
	Size   int64
	Root   tlog.Hash
	// Note is the signed note it was read from or signed as.
	Note []byte
}

// Sign signs a checkpoint of the tree of size leaves with root.
func (k *Key) Sign(size int64, root tlog.Hash) (*Checkpoint, error) {
	text := fmt.Sprintf("%s\n%d\n%s\n", k.Origin, size, base64.StdEncoding.EncodeToString(root[:]))
	msg, err := note.Sign(&note.Note{Text: text}, k.Signer)
	if err != nil {
		return nil, fmt.Errorf("audit: sign checkpoint: %w", err)
	}
	return &Checkpoint{Origin: k.Origin, Size: size, Root: root, Note: msg}, nil
}

// ErrCheckpoint wraps every reason OpenCheckpoint refuses a note.
var ErrCheckpoint = errors.New("checkpoint refused")

// OpenCheckpoint verifies a signed checkpoint against v and parses it. It
// refuses a note without a valid signature by v (a wrong, unknown or
// absent key, a changed byte), whose origin is not v's name, or whose
// body is not exactly origin, size and root: no extension lines. Other
// signatures (a witness's) may accompany v's.
func OpenCheckpoint(msg []byte, v note.Verifier) (*Checkpoint, error) {
	if len(msg) > MaxCheckpointBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrCheckpoint, len(msg), MaxCheckpointBytes)
	}
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		var unverified *note.UnverifiedNoteError
		if errors.As(err, &unverified) {
			return nil, fmt.Errorf("%w: not signed by %s", ErrCheckpoint, v.Name())
		}
		return nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	lines := strings.Split(n.Text, "\n")
	if len(lines) != 4 || lines[3] != "" {
		return nil, fmt.Errorf("%w: body has %d lines, want origin, size and root", ErrCheckpoint, len(lines)-1)
	}
	if lines[0] != v.Name() {
		return nil, fmt.Errorf("%w: origin %q, want %q", ErrCheckpoint, lines[0], v.Name())
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 || strconv.FormatInt(size, 10) != lines[1] {
		return nil, fmt.Errorf("%w: bad size %q", ErrCheckpoint, lines[1])
	}
	root, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(root) != tlog.HashSize || base64.StdEncoding.EncodeToString(root) != lines[2] {
		return nil, fmt.Errorf("%w: bad root %q", ErrCheckpoint, lines[2])
	}
	c := &Checkpoint{Origin: lines[0], Size: size, Note: msg}
	copy(c.Root[:], root)
	return c, nil
}

// PeekSize reads the size line of a checkpoint note without verifying it;
// -1 when there is none.
func PeekSize(msg []byte) int64 {
	lines := strings.SplitN(string(msg), "\n", 3)
	if len(lines) < 3 {
		return -1
	}
	n, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		return -1
	}
	return n
}
