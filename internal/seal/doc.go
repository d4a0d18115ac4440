// Package seal encrypts a result to one recipient: the agent that asked
// for it. A sealed result opens only with the recipient's private key, so
// neither the disk it is stored on nor a principal that reads it there
// can read it.
//
// The recipient's key is its nkey: an ed25519 key whose X25519 form
// (RFC 7748, the birational map of RFC 8032's curve) takes part in an
// ephemeral-static Diffie-Hellman exchange with a key the sealer makes
// and never stores. A sealer keeps one ephemeral key for up to EpochSeals
// seals or EpochAge, caching the shared key per recipient, so that a seal
// costs an AES-GCM pass, not a scalar multiplication; the ephemeral
// private key lives in memory only and is dropped at the epoch's end.
//
// Format (version 1): 0x01 | ephemeral public key (32) | nonce (12) |
// AES-256-GCM ciphertext and tag. The key is HKDF-SHA256 of the shared
// secret, salted with both public keys; the additional data is the op id,
// so a sealed result cannot be passed off as another op's.
package seal
