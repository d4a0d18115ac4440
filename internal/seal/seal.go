package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"

	"github.com/nats-io/nkeys"
)

// Version is the first byte of a sealed result.
const Version = 1

// Overhead is how many bytes sealing adds.
const Overhead = 1 + 32 + 12 + 16

// Epoch bounds: a sealer makes a new ephemeral key after EpochSeals seals
// or EpochAge, whichever comes first.
const (
	EpochSeals = 1 << 20
	EpochAge   = 10 * time.Minute
)

const info = "airlock result v1"

// ErrOpen is the error of a result that does not open: another
// recipient's, another op's, or changed.
var ErrOpen = errors.New("seal: result does not open with this key (another recipient's, another op's, or changed)")

// Recipient is the X25519 public key of the nkey user public key pub
// ("U...").
func Recipient(pub string) (*ecdh.PublicKey, error) {
	raw, err := nkeys.Decode(nkeys.PrefixByteUser, []byte(pub))
	if err != nil {
		return nil, fmt.Errorf("seal: recipient %q: %w", pub, err)
	}
	u, err := montgomery(raw)
	if err != nil {
		return nil, fmt.Errorf("seal: recipient %s: %w", pub, err)
	}
	k, err := ecdh.X25519().NewPublicKey(u)
	if err != nil {
		return nil, fmt.Errorf("seal: recipient %s: %w", pub, err)
	}
	// A key of small order makes every exchange with it zero: nothing
	// could be sealed to it. The clamped scalar is a multiple of the
	// cofactor, so the exchange with a fixed key is zero exactly then.
	if _, err := probe.ECDH(k); err != nil {
		return nil, fmt.Errorf("seal: recipient %s is a point of small order, no usable key", pub)
	}
	return k, nil
}

// probe is a fixed key that tells a small-order recipient (Recipient).
var probe = func() *ecdh.PrivateKey {
	k, err := ecdh.X25519().NewPrivateKey(sha512Half("airlock seal probe"))
	if err != nil {
		panic(err)
	}
	return k
}()

func sha512Half(s string) []byte {
	h := sha512.Sum512([]byte(s))
	return h[:32]
}

// PrivateKey is the X25519 private key of the nkey seed seed ("SU..."):
// the first half of SHA-512 of the ed25519 seed, as ed25519 derives its
// scalar (X25519 clamps it the same way).
func PrivateKey(seed []byte) (*ecdh.PrivateKey, error) {
	_, raw, err := nkeys.DecodeSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("seal: seed: %w", err)
	}
	h := sha512.Sum512(raw)
	defer clear(h[:])
	return ecdh.X25519().NewPrivateKey(h[:32])
}

// p is the field prime of curve25519, 2^255 - 19.
var p = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 255), big.NewInt(19))

// montgomery maps an ed25519 public key (y, little-endian, the top bit
// x's sign) to the X25519 u-coordinate u = (1+y)/(1-y) mod p.
func montgomery(ed []byte) ([]byte, error) {
	if len(ed) != 32 {
		return nil, fmt.Errorf("ed25519 public key of %d bytes", len(ed))
	}
	be := make([]byte, 32)
	for i, b := range ed {
		be[31-i] = b
	}
	be[0] &= 0x7f
	y := new(big.Int).SetBytes(be)
	if y.Cmp(p) >= 0 {
		return nil, errors.New("not a canonical ed25519 point")
	}
	one := big.NewInt(1)
	den := new(big.Int).Sub(one, y)
	den.Mod(den, p)
	if den.Sign() == 0 {
		return nil, errors.New("the identity point has no X25519 form")
	}
	num := new(big.Int).Add(one, y)
	u := num.Mul(num, den.ModInverse(den, p))
	u.Mod(u, p)
	out := make([]byte, 32)
	u.FillBytes(out)
	for i, j := 0, 31; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// Sealer seals results. It is safe for concurrent use.
type Sealer struct {
	now func() time.Time

	mu    sync.Mutex
	eph   *ecdh.PrivateKey
	epk   []byte
	born  time.Time
	seals int
	aeads map[string]cipher.AEAD // by recipient public key, this epoch
}

// NewSealer returns a sealer.
func NewSealer() *Sealer { return &Sealer{now: time.Now} }

// Seal encrypts plain for recipient, bound to opID.
func (s *Sealer) Seal(recipient *ecdh.PublicKey, opID string, plain []byte) ([]byte, error) {
	aead, epk, err := s.key(recipient)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 1+32+12, Overhead+len(plain))
	out[0] = Version
	copy(out[1:33], epk)
	if _, err := rand.Read(out[33:45]); err != nil {
		return nil, err
	}
	return aead.Seal(out, out[33:45], plain, []byte(opID)), nil
}

// key returns the epoch's AEAD for recipient and the epoch's public key,
// starting a new epoch when this one is spent.
func (s *Sealer) key(recipient *ecdh.PublicKey) (cipher.AEAD, []byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.eph == nil || s.seals >= EpochSeals || now.Sub(s.born) >= EpochAge {
		eph, err := ecdh.X25519().GenerateKey(rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		s.eph, s.epk, s.born, s.seals, s.aeads = eph, eph.PublicKey().Bytes(), now, 0, map[string]cipher.AEAD{}
	}
	s.seals++
	rk := string(recipient.Bytes())
	if a, ok := s.aeads[rk]; ok {
		return a, s.epk, nil
	}
	a, err := derive(s.eph, recipient, s.epk, recipient.Bytes())
	if err != nil {
		return nil, nil, err
	}
	s.aeads[rk] = a
	return a, s.epk, nil
}

// derive is the AEAD of the exchange between priv and peer, where epk is
// the ephemeral side's public key and rcpt the recipient's.
func derive(priv *ecdh.PrivateKey, peer *ecdh.PublicKey, epk, rcpt []byte) (cipher.AEAD, error) {
	shared, err := priv.ECDH(peer)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	defer clear(shared)
	salt := append(append([]byte{}, epk...), rcpt...)
	k, err := hkdf.Key(sha256.New, shared, salt, info, 32)
	if err != nil {
		return nil, err
	}
	defer clear(k)
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// Opener opens results sealed to one private key. It is safe for
// concurrent use.
type Opener struct {
	priv *ecdh.PrivateKey

	mu    sync.Mutex
	aeads map[string]cipher.AEAD // by ephemeral public key
}

// NewOpener returns an opener for priv.
func NewOpener(priv *ecdh.PrivateKey) *Opener {
	return &Opener{priv: priv, aeads: map[string]cipher.AEAD{}}
}

// maxEpochs bounds an opener's cache of ephemeral keys.
const maxEpochs = 1024

// Public is the public key results for this opener are sealed to.
func (o *Opener) Public() *ecdh.PublicKey { return o.priv.PublicKey() }

// Open decrypts sealed, which must be bound to opID.
func (o *Opener) Open(opID string, sealed []byte) ([]byte, error) {
	if len(sealed) < Overhead || sealed[0] != Version {
		return nil, ErrOpen
	}
	epk := sealed[1:33]
	o.mu.Lock()
	a, ok := o.aeads[string(epk)]
	o.mu.Unlock()
	if !ok {
		peer, err := ecdh.X25519().NewPublicKey(epk)
		if err != nil {
			return nil, ErrOpen
		}
		if a, err = derive(o.priv, peer, epk, o.priv.PublicKey().Bytes()); err != nil {
			return nil, ErrOpen
		}
		o.mu.Lock()
		if len(o.aeads) >= maxEpochs {
			clear(o.aeads)
		}
		o.aeads[string(epk)] = a
		o.mu.Unlock()
	}
	plain, err := a.Open(nil, sealed[33:45], sealed[45:], []byte(opID))
	if err != nil {
		return nil, ErrOpen
	}
	return plain, nil
}
