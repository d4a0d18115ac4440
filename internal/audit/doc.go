// Package audit is the tamper-evident log of every op event: a Merkle
// tree (RFC 6962, with transparency-log tiles) over one leaf per event
// stored in AIRLOCK_OPS, checkpoints signed as notes by the deployment's
// ed25519 key, inclusion proofs an auditor checks offline, and the
// verifier that recomputes the tree from the leaves and checks every
// checkpoint and anchor against it (ADR 0011, ADR 0015, ADR 0016).
package audit
