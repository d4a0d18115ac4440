package seal

import (
	"bytes"
	"crypto/ecdh"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"
)

func agentKeys(t testing.TB) (*ecdh.PublicKey, *ecdh.PrivateKey) {
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	seed, err := kp.Seed()
	require.NoError(t, err)
	rcpt, err := Recipient(pub)
	require.NoError(t, err)
	priv, err := PrivateKey(seed)
	require.NoError(t, err)
	return rcpt, priv
}

// The X25519 key derived from the seed and the one mapped from the
// ed25519 public key are one key pair.
func TestRecipientMatchesSeed(t *testing.T) {
	for range 50 {
		rcpt, priv := agentKeys(t)
		require.Equal(t, rcpt.Bytes(), priv.PublicKey().Bytes())
	}
}

func TestSealOpens(t *testing.T) {
	rcpt, priv := agentKeys(t)
	s := NewSealer()
	o := NewOpener(priv)
	for _, plain := range [][]byte{[]byte("null"), []byte(`{"stdout":"hello\n","exit_code":0}`), bytes.Repeat([]byte("x"), 1<<20)} {
		sealed, err := s.Seal(rcpt, "op_1", plain)
		require.NoError(t, err)
		require.Len(t, sealed, len(plain)+Overhead)
		require.False(t, bytes.Contains(sealed, plain), "the plaintext shows through")
		got, err := o.Open("op_1", sealed)
		require.NoError(t, err)
		require.Equal(t, plain, got)
	}
}

func TestOpenRefuses(t *testing.T) {
	rcpt, priv := agentKeys(t)
	_, other := agentKeys(t)
	sealed, err := NewSealer().Seal(rcpt, "op_1", []byte(`"secret"`))
	require.NoError(t, err)

	_, err = NewOpener(other).Open("op_1", sealed)
	require.ErrorIs(t, err, ErrOpen, "another agent's key")
	_, err = NewOpener(priv).Open("op_2", sealed)
	require.ErrorIs(t, err, ErrOpen, "another op's result")
	for _, i := range []int{0, 1, 40, 50, len(sealed) - 1} {
		bad := bytes.Clone(sealed)
		bad[i] ^= 1
		_, err = NewOpener(priv).Open("op_1", bad)
		require.ErrorIs(t, err, ErrOpen, "byte %d changed", i)
	}
	_, err = NewOpener(priv).Open("op_1", sealed[:Overhead-1])
	require.ErrorIs(t, err, ErrOpen, "truncated")
}

func TestEpochsRotate(t *testing.T) {
	rcpt, priv := agentKeys(t)
	now := time.Unix(0, 0)
	s := NewSealer()
	s.now = func() time.Time { return now }
	a, err := s.Seal(rcpt, "op_1", []byte("1"))
	require.NoError(t, err)
	b, err := s.Seal(rcpt, "op_2", []byte("2"))
	require.NoError(t, err)
	require.Equal(t, a[1:33], b[1:33], "one epoch, one ephemeral key")
	require.NotEqual(t, a[33:45], b[33:45], "every seal its own nonce")
	now = now.Add(EpochAge)
	c, err := s.Seal(rcpt, "op_3", []byte("3"))
	require.NoError(t, err)
	require.NotEqual(t, a[1:33], c[1:33], "a new epoch after EpochAge")
	o := NewOpener(priv)
	for i, sealed := range [][]byte{a, b, c} {
		got, err := o.Open([]string{"op_1", "op_2", "op_3"}[i], sealed)
		require.NoError(t, err)
		require.Equal(t, []byte{byte('1' + i)}, got)
	}
}

func TestRecipientRefusesBadKeys(t *testing.T) {
	_, err := Recipient("not a key")
	require.Error(t, err)
	// Small-order ed25519 points: y = 1 (the identity), y = 0, y = -1.
	for _, y := range [][]byte{
		append([]byte{1}, make([]byte, 31)...),
		make([]byte, 32),
		{0xec, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
			0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
	} {
		pub, err := nkeys.Encode(nkeys.PrefixByteUser, y)
		require.NoError(t, err)
		_, err = Recipient(string(pub))
		require.Error(t, err, "%x", y)
	}
	kp, _ := nkeys.CreateAccount()
	pub, _ := kp.PublicKey()
	_, err = Recipient(pub)
	require.Error(t, err, "an account key is no agent's")
}

func BenchmarkSeal(b *testing.B) {
	rcpt, _ := agentKeys(b)
	s := NewSealer()
	plain := []byte(`{"stdout":"hello\n","stderr":"","exit_code":0}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Seal(rcpt, "op_0123456789abcdef0123456789abcdef", plain); err != nil {
			b.Fatal(err)
		}
	}
}
