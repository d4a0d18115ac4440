package approvers

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/go-webauthn/webauthn/webauthn"
	"github.com/nats-io/nats.go/jetstream"
)

// Limits.
const (
	// MaxWorkspaces bounds the workspaces one account may resolve in.
	MaxWorkspaces = 64
	// MaxPasskeys bounds the passkeys one account may enroll.
	MaxPasskeys = 16
	// DefaultEnrollTTL is how long an enrollment link works.
	DefaultEnrollTTL = 24 * time.Hour
	// MaxEnrollTTL bounds it.
	MaxEnrollTTL = 7 * 24 * time.Hour
)

// Errors a caller tells apart.
var (
	// ErrNotFound: no such account.
	ErrNotFound = errors.New("approvers: no such account")
	// ErrUsed: the link or enrollment was used, expired or never made.
	ErrUsed = errors.New("approvers: the link was used already, expired, or never made")
	// ErrExists: an account of that name exists.
	ErrExists = errors.New("approvers: an account of that name exists")
)

// Passkey is one enrolled WebAuthn credential of an account.
type Passkey struct {
	// PublicKey is the credential's public key as an approval's signature
	// names it: base64url of its PKIX DER (events.AlgWebAuthn).
	PublicKey string `json:"public_key"`
	// RP is the relying party it was enrolled at: its assertions must be
	// made there.
	RP events.RelyingParty `json:"rp"`
	// Credential is the WebAuthn library's record of it (id, COSE key,
	// flags), what a login checks.
	Credential webauthn.Credential `json:"credential"`
	// EnrolledAt is when it was enrolled.
	EnrolledAt time.Time `json:"enrolled_at"`
}

// Account is an approver of the inbox: who may resolve in which
// workspaces, with which passkeys.
type Account struct {
	Name       string   `json:"name"`
	Workspaces []string `json:"workspaces"`
	// Handle is the WebAuthn user handle: random, never shown.
	Handle    []byte    `json:"handle"`
	Passkeys  []Passkey `json:"passkeys,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// Can reports whether the account may see and resolve holds of ws.
func (a *Account) Can(ws string) bool { return slices.Contains(a.Workspaces, ws) }

// Passkey returns the account's passkey whose public key is key.
func (a *Account) Passkey(key string) (Passkey, bool) {
	for _, p := range a.Passkeys {
		if p.PublicKey == key {
			return p, true
		}
	}
	return Passkey{}, false
}

// WebAuthnID, WebAuthnName, WebAuthnDisplayName and WebAuthnCredentials
// make an Account a webauthn.User.
func (a *Account) WebAuthnID() []byte          { return a.Handle }
func (a *Account) WebAuthnName() string        { return a.Name }
func (a *Account) WebAuthnDisplayName() string { return a.Name }
func (a *Account) WebAuthnCredentials() []webauthn.Credential {
	out := make([]webauthn.Credential, len(a.Passkeys))
	for i, p := range a.Passkeys {
		out[i] = p.Credential
	}
	return out
}

// Enrollment is what an enrollment link stands for.
type Enrollment struct {
	Approver string `json:"approver"`
	// Handle is the account's handle when the link was made: a link of
	// an account removed and made again enrolls nothing.
	Handle    []byte    `json:"handle"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Link is what a hold link stands for.
type Link struct {
	Workspace string    `json:"workspace"`
	HoldID    string    `json:"hold_id"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Session is a logged-in approver.
type Session struct {
	Approver string `json:"approver"`
	// Handle is the account's handle at sign-in: a session outlives
	// neither its account's removal nor its making again.
	Handle    []byte    `json:"handle"`
	CSRF      string    `json:"csrf"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Store keeps accounts, links and sessions in the approvers bucket.
type Store struct {
	kv    jetstream.KeyValue
	clock func() time.Time
}

// Open binds the approvers bucket, which streams.Provision made.
func Open(ctx context.Context, js jetstream.JetStream, clock func() time.Time) (*Store, error) {
	kv, err := js.KeyValue(ctx, streams.ApproversBucket)
	if err != nil {
		return nil, fmt.Errorf("approvers: bucket %s: %w (airlock serve makes it at start)", streams.ApproversBucket, err)
	}
	if clock == nil {
		clock = time.Now
	}
	return &Store{kv: kv, clock: clock}, nil
}

func accountKey(name string) string { return "account." + name }

func handleKey(handle []byte) string { return "handle." + hex.EncodeToString(handle) }

// ByHandle is the account whose WebAuthn user handle is handle: the
// account a discoverable sign-in names.
func (s *Store) ByHandle(ctx context.Context, handle []byte) (*Account, error) {
	if len(handle) == 0 || len(handle) > 64 {
		return nil, ErrNotFound
	}
	e, err := s.kv.Get(ctx, handleKey(handle))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	a, _, err := s.Account(ctx, string(e.Value()))
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(a.Handle, handle) {
		return nil, ErrNotFound // made again since: another handle
	}
	return a, nil
}

// secretKey is where a token's record lives: its hash, never the token.
func secretKey(kind, token string) string {
	sum := sha256.Sum256([]byte(token))
	return kind + "." + hex.EncodeToString(sum[:])
}

// NewToken is 32 random bytes, base64url.
func NewToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Account reads an account and its revision.
func (s *Store) Account(ctx context.Context, name string) (*Account, uint64, error) {
	e, err := s.kv.Get(ctx, accountKey(name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, ErrNotFound
	}
	if err != nil {
		return nil, 0, err
	}
	var a Account
	if err := json.Unmarshal(e.Value(), &a); err != nil {
		return nil, 0, fmt.Errorf("approvers: account %s: %w", name, err)
	}
	return &a, e.Revision(), nil
}

// Accounts lists every account, by name.
func (s *Store) Accounts(ctx context.Context) ([]*Account, error) {
	lister, err := s.kv.ListKeysFiltered(ctx, "account.*")
	if err != nil {
		return nil, err
	}
	var names []string
	for k := range lister.Keys() {
		names = append(names, strings.TrimPrefix(k, "account."))
	}
	slices.Sort(names)
	out := make([]*Account, 0, len(names))
	for _, n := range names {
		a, _, err := s.Account(ctx, n)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// Add makes an account, or gives an existing one the workspaces ws, and
// returns an enrollment token that works once, until ttl from now.
func (s *Store) Add(ctx context.Context, name string, ws []string, ttl time.Duration) (*Account, string, error) {
	if len(ws) == 0 || len(ws) > MaxWorkspaces {
		return nil, "", fmt.Errorf("approvers: an approver resolves in 1 to %d workspaces, not %d", MaxWorkspaces, len(ws))
	}
	if ttl <= 0 || ttl > MaxEnrollTTL {
		return nil, "", fmt.Errorf("approvers: an enrollment link works for 1s to %s, not %s", MaxEnrollTTL, ttl)
	}
	a, rev, err := s.Account(ctx, name)
	switch {
	case errors.Is(err, ErrNotFound):
		handle := make([]byte, 32)
		_, _ = rand.Read(handle)
		a = &Account{Name: name, Handle: handle, CreatedAt: s.clock().UTC()}
	case err != nil:
		return nil, "", err
	}
	for _, w := range ws {
		if !slices.Contains(a.Workspaces, w) {
			a.Workspaces = append(a.Workspaces, w)
		}
	}
	if len(a.Workspaces) > MaxWorkspaces {
		return nil, "", fmt.Errorf("approvers: %s would resolve in %d workspaces; at most %d", name, len(a.Workspaces), MaxWorkspaces)
	}
	if err := s.put(ctx, a, rev); err != nil {
		return nil, "", err
	}
	if rev == 0 {
		if _, err := s.kv.Put(ctx, handleKey(a.Handle), []byte(a.Name)); err != nil {
			return nil, "", fmt.Errorf("approvers: write handle of %s: %w", name, err)
		}
	}
	token := NewToken()
	exp := s.clock().Add(ttl).UTC()
	if err := s.createSecret(ctx, secretKey("enroll", token), Enrollment{Approver: name, Handle: a.Handle, ExpiresAt: exp}, ttl); err != nil {
		return nil, "", err
	}
	return a, token, nil
}

// put writes a, created when rev is 0, else over revision rev.
func (s *Store) put(ctx context.Context, a *Account, rev uint64) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	if rev == 0 {
		_, err = s.kv.Create(ctx, accountKey(a.Name), b)
	} else {
		_, err = s.kv.Update(ctx, accountKey(a.Name), b, rev)
	}
	if err != nil {
		return fmt.Errorf("approvers: write account %s: %w", a.Name, err)
	}
	return nil
}

// AddPasskey records a passkey enrolled by name.
func (s *Store) AddPasskey(ctx context.Context, name string, p Passkey) error {
	for range 3 {
		a, rev, err := s.Account(ctx, name)
		if err != nil {
			return err
		}
		if len(a.Passkeys) >= MaxPasskeys {
			return fmt.Errorf("approvers: %s has %d passkeys, the most an account may have", name, MaxPasskeys)
		}
		a.Passkeys = append(a.Passkeys, p)
		if err := s.put(ctx, a, rev); err == nil {
			return nil
		} else if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
			return err
		}
	}
	return fmt.Errorf("approvers: account %s changed under every try", name)
}

// Remove deletes an account: its passkeys resolve nothing from then on.
func (s *Store) Remove(ctx context.Context, name string) error {
	a, _, err := s.Account(ctx, name)
	if err != nil {
		return err
	}
	if err := s.kv.Purge(ctx, accountKey(name)); err != nil {
		return err
	}
	return s.kv.Purge(ctx, handleKey(a.Handle))
}

func (s *Store) createSecret(ctx context.Context, key string, v any, ttl time.Duration) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	// The bucket's TTL works in whole seconds.
	ttl = max(ttl.Round(time.Second), time.Second)
	if _, err := s.kv.Create(ctx, key, b, jetstream.KeyTTL(ttl)); err != nil {
		return fmt.Errorf("approvers: write %s: %w", key[:strings.IndexByte(key, '.')], err)
	}
	return nil
}

// peekSecret reads a token's record, refusing an expired one.
func (s *Store) peekSecret(ctx context.Context, kind, token string, v any, expiresAt func() time.Time) (uint64, error) {
	if token == "" || len(token) > 128 {
		return 0, ErrUsed
	}
	e, err := s.kv.Get(ctx, secretKey(kind, token))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, ErrUsed
	}
	if err != nil {
		return 0, err
	}
	if err := json.Unmarshal(e.Value(), v); err != nil {
		return 0, err
	}
	if !s.clock().Before(expiresAt()) {
		return 0, ErrUsed
	}
	return e.Revision(), nil
}

// useSecret deletes a token's record at the revision it was read: of two
// uses racing, in this process or another, one wins.
func (s *Store) useSecret(ctx context.Context, kind, token string, rev uint64) error {
	err := s.kv.Delete(ctx, secretKey(kind, token), jetstream.LastRevision(rev))
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return ErrUsed
	}
	return err
}

// Enrollment reads an enrollment token without using it up.
func (s *Store) Enrollment(ctx context.Context, token string) (*Enrollment, uint64, error) {
	var en Enrollment
	rev, err := s.peekSecret(ctx, "enroll", token, &en, func() time.Time { return en.ExpiresAt })
	if err != nil {
		return nil, 0, err
	}
	return &en, rev, nil
}

// UseEnrollment uses an enrollment token up, once.
func (s *Store) UseEnrollment(ctx context.Context, token string, rev uint64) error {
	return s.useSecret(ctx, "enroll", token, rev)
}

// MintLink makes a single-use link token to a hold, until expires.
func (s *Store) MintLink(ctx context.Context, ws, holdID string, expires time.Time) (string, error) {
	ttl := expires.Sub(s.clock())
	if ttl <= 0 {
		return "", fmt.Errorf("approvers: hold %s has expired; no link", holdID)
	}
	token := NewToken()
	return token, s.createSecret(ctx, secretKey("link", token), Link{Workspace: ws, HoldID: holdID, ExpiresAt: expires.UTC()}, ttl)
}

// UseLink reads a link token and, if check accepts it, uses it up, once:
// a link check refuses stays as it was.
func (s *Store) UseLink(ctx context.Context, token string, check func(*Link) error) (*Link, error) {
	var l Link
	rev, err := s.peekSecret(ctx, "link", token, &l, func() time.Time { return l.ExpiresAt })
	if err != nil {
		return nil, err
	}
	if err := check(&l); err != nil {
		return nil, err
	}
	if err := s.useSecret(ctx, "link", token, rev); err != nil {
		return nil, err
	}
	return &l, nil
}

// NewSession starts a session of approver, for at most life; it returns
// the session's token (the cookie's secret).
func (s *Store) NewSession(ctx context.Context, a *Account, life time.Duration) (string, *Session, error) {
	token := NewToken()
	now := s.clock().UTC()
	sess := &Session{Approver: a.Name, Handle: a.Handle, CSRF: NewToken(), CreatedAt: now, ExpiresAt: now.Add(life)}
	return token, sess, s.createSecret(ctx, secretKey("session", token), sess, life)
}

// Session reads a live session.
func (s *Store) Session(ctx context.Context, token string) (*Session, error) {
	var sess Session
	if _, err := s.peekSecret(ctx, "session", token, &sess, func() time.Time { return sess.ExpiresAt }); err != nil {
		return nil, err
	}
	return &sess, nil
}

// EndSession ends a session.
func (s *Store) EndSession(ctx context.Context, token string) error {
	if token == "" || len(token) > 128 {
		return nil
	}
	return s.kv.Purge(ctx, secretKey("session", token))
}

// NewCeremony records a passkey ceremony's challenge, for ttl: a
// ceremony finishes once.
func (s *Store) NewCeremony(ctx context.Context, challenge string, ttl time.Duration) error {
	return s.createSecret(ctx, secretKey("ceremony", challenge), struct {
		ExpiresAt time.Time `json:"expires_at"`
	}{s.clock().Add(ttl).UTC()}, ttl)
}

// UseCeremony uses a ceremony's challenge up; ErrUsed when it was used,
// expired, or never begun.
func (s *Store) UseCeremony(ctx context.Context, challenge string) error {
	var c struct {
		ExpiresAt time.Time `json:"expires_at"`
	}
	rev, err := s.peekSecret(ctx, "ceremony", challenge, &c, func() time.Time { return c.ExpiresAt })
	if err != nil {
		return err
	}
	return s.useSecret(ctx, "ceremony", challenge, rev)
}

// MACKey is the deployment's key for the inbox's cookies, made once.
func (s *Store) MACKey(ctx context.Context) ([]byte, error) {
	const key = "mac"
	e, err := s.kv.Get(ctx, key)
	if err == nil {
		return base64.RawURLEncoding.DecodeString(string(e.Value()))
	}
	if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, err
	}
	k := NewToken()
	if _, err := s.kv.Create(ctx, key, []byte(k)); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return nil, err
	}
	return s.MACKey(ctx)
}

// Mark is value and a MAC of purpose and value by key, value "." MAC:
// what a cookie keeps that its holder must not change, and that passes
// for nothing but what it is for.
func Mark(key []byte, purpose, value string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write([]byte(value))
	return value + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Unmark returns the value of a Mark of purpose whose MAC checks out.
func Unmark(key []byte, purpose, marked string) (string, bool) {
	i := strings.LastIndexByte(marked, '.')
	if i < 0 {
		return "", false
	}
	if !hmac.Equal([]byte(Mark(key, purpose, marked[:i])), []byte(marked)) {
		return "", false
	}
	return marked[:i], true
}

// Unix is t in whole seconds, as a cookie keeps it.
func Unix(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }
