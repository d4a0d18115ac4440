package projector

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/tlog"
)

// ErrCheckpointConflict is returned when a checkpoint kept in JetStream is
// not one this log could have written or will reach: it covers more
// leaves than this data dir ever signed, or it disagrees with the log's
// root at its size. A restored store, a copied data dir running beside its
// original, a rewritten history: the projector stops.
var ErrCheckpointConflict = errors.New("projector: the checkpoint in JetStream conflicts with the local log")

// Checkpoints keeps the log's checkpoints in the JetStream bucket
// streams.AuditBucket, each written with compare-and-swap on its key's
// revision so that a checkpoint never replaces one it does not extend:
//
//   - the deployment's newest (streams.AuditCheckpointKey): every instance
//     of a deployment folds the same stream into the same tree and signs
//     with the same key, so their checkpoints of one size are the same
//     note; an instance behind the newest does not replace it, and checks
//     it once its own log reaches that size;
//   - this instance's newest (streams.AuditInstanceKey): what this data
//     dir signed, so that a data dir put back to an older copy is caught
//     (ROLLBACK) even while the deployment has moved on.
//
// It is safe for concurrent use.
type Checkpoints struct {
	kv  jetstream.KeyValue
	key *audit.Key

	mu     sync.Mutex
	own    kvEntry
	shared kvEntry
	// ahead is the deployment's newest checkpoint while it covers more
	// leaves than this log: checked when the log gets there.
	ahead *audit.Checkpoint
}

// kvEntry is where one key of the bucket stands, as this process knows.
type kvEntry struct {
	key  string
	rev  uint64
	size int64 // of the checkpoint at rev; -1 when unknown
}

// Found is what OpenCheckpoints read from the bucket.
type Found struct {
	// Own is this instance's newest checkpoint, nil when it has none.
	Own []byte
	// Shared is the deployment's newest checkpoint, nil when none.
	Shared []byte
	// Legacy reports a bucket written before instances had keys of their
	// own: a deployment checkpoint and no instance's. It was this
	// instance's, and is held to the same rule (a start may not be behind
	// it).
	Legacy bool
}

// ErrOtherLog is returned when the deployment's audit log is signed with
// another key than this data dir's.
var ErrOtherLog = errors.New("the deployment's audit log is signed with another key")

// OpenCheckpoints opens the bucket, makes sure key signs the deployment's
// log (the first instance to start names it; ErrOtherLog for another key)
// and reads the checkpoints of the log for the instance named.
func OpenCheckpoints(ctx context.Context, js jetstream.JetStream, key *audit.Key, instance string) (*Checkpoints, *Found, error) {
	kv, err := js.KeyValue(ctx, streams.AuditBucket)
	if err != nil {
		return nil, nil, fmt.Errorf("audit bucket: %w", err)
	}
	if err := claimLog(ctx, kv, key); err != nil {
		return nil, nil, err
	}
	c := &Checkpoints{
		kv: kv, key: key,
		own:    kvEntry{key: streams.AuditInstanceKey(key.Origin, instance), size: -1},
		shared: kvEntry{key: streams.AuditCheckpointKey(key.Origin), size: -1},
	}
	found := &Found{}
	for _, e := range []struct {
		entry *kvEntry
		into  *[]byte
	}{{&c.own, &found.Own}, {&c.shared, &found.Shared}} {
		v, err := kv.Get(ctx, e.entry.key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			continue
		case err != nil:
			return nil, nil, fmt.Errorf("audit bucket: %w", err)
		}
		e.entry.rev, e.entry.size = v.Revision(), audit.PeekSize(v.Value())
		*e.into = v.Value()
	}
	if found.Own == nil && found.Shared != nil {
		keys, err := kv.ListKeysFiltered(ctx, streams.AuditInstanceKeys(key.Origin))
		if err != nil {
			return nil, nil, fmt.Errorf("audit bucket: %w", err)
		}
		found.Legacy = true
		for range keys.Keys() {
			found.Legacy = false
		}
	}
	return c, found, nil
}

// claimLog records key's verifier as the deployment's log, unless one is
// recorded: then it must be key's.
func claimLog(ctx context.Context, kv jetstream.KeyValue, key *audit.Key) error {
	for range 3 {
		e, err := kv.Get(ctx, streams.AuditLogKey)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			_, err := kv.Create(ctx, streams.AuditLogKey, []byte(key.Public))
			if err == nil {
				return nil
			}
			if !errors.Is(err, jetstream.ErrKeyExists) {
				return fmt.Errorf("audit bucket: %w", err)
			}
			continue // another instance named it first: compare
		case err != nil:
			return fmt.Errorf("audit bucket: %w", err)
		}
		if string(e.Value()) == key.Public {
			return nil
		}
		theirs := string(e.Value())
		if i := strings.IndexByte(theirs, '+'); i > 0 {
			theirs = theirs[:i]
		}
		return fmt.Errorf("%w: this data dir's audit key signs %s, the deployment's log is %s (bucket %s, key %s). Every instance of a deployment signs one log: copy audit.key and audit.pub from a data dir of this deployment into this one (before its first start; a data dir with a log of its own needs its projection rebuilt with `airlock replay --into`, see docs/operations.md)",
			ErrOtherLog, key.Origin, theirs, streams.AuditBucket, streams.AuditLogKey)
	}
	return fmt.Errorf("audit bucket: key %s keeps changing", streams.AuditLogKey)
}

// Trusted is what a start verifies the log of size leaves against: this
// instance's newest checkpoint (which the log may not be behind), and the
// deployment's when the log reaches it. A deployment checkpoint beyond the
// log is left to check once the projector gets there (CheckAhead).
func (c *Checkpoints) Trusted(f *Found, size int64) ([]audit.Trusted, error) {
	var out []audit.Trusted
	if f.Own != nil {
		out = append(out, audit.Trusted{Name: "jetstream (this instance's newest)", Note: f.Own})
	}
	if f.Shared == nil {
		return out, nil
	}
	if f.Legacy || audit.PeekSize(f.Shared) <= size {
		return append(out, audit.Trusted{Name: "jetstream (the deployment's newest)", Note: f.Shared}), nil
	}
	cp, err := audit.OpenCheckpoint(f.Shared, c.key.Verifier)
	if err != nil {
		// Not the deployment's log at all: the verification reports it.
		return append(out, audit.Trusted{Name: "jetstream (the deployment's newest)", Note: f.Shared}), nil
	}
	c.mu.Lock()
	c.ahead = cp
	c.mu.Unlock()
	return out, nil
}

// Has reports whether the bucket holds cp already as this instance's, and
// as or behind the deployment's, as far as this process knows.
func (c *Checkpoints) Has(cp *audit.Checkpoint) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.own.rev != 0 && c.own.size == cp.Size && c.shared.rev != 0 && c.shared.size >= cp.Size
}

// Publish stores cp as this instance's newest checkpoint and, unless the
// deployment's newest covers more, as the deployment's. A lost
// compare-and-swap re-reads the key: a checkpoint this log extends (signed
// by the key, no larger, with the log's root at its size) is replaced; a
// deployment checkpoint beyond this log is kept, to be checked once the
// log reaches it; anything else is ErrCheckpointConflict.
func (c *Checkpoints) Publish(ctx context.Context, cp *audit.Checkpoint, hashes tlog.HashReader) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.publish(ctx, &c.own, cp, hashes, false); err != nil {
		return err
	}
	return c.publish(ctx, &c.shared, cp, hashes, true)
}

func (c *Checkpoints) publish(ctx context.Context, e *kvEntry, cp *audit.Checkpoint, hashes tlog.HashReader, shared bool) error {
	if e.rev != 0 && e.size == cp.Size {
		return nil
	}
	for range 5 {
		var err error
		if e.rev == 0 {
			e.rev, err = c.kv.Create(ctx, e.key, cp.Note)
		} else {
			e.rev, err = c.kv.Update(ctx, e.key, cp.Note, e.rev)
		}
		if err == nil {
			e.size = cp.Size
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return fmt.Errorf("publish checkpoint %s: %w", e.key, err)
		}
		v, gerr := c.kv.Get(ctx, e.key)
		if gerr != nil {
			return fmt.Errorf("publish checkpoint %s: %w", e.key, gerr)
		}
		e.rev, e.size = v.Revision(), audit.PeekSize(v.Value())
		if shared && e.size > cp.Size {
			o, err := audit.OpenCheckpoint(v.Value(), c.key.Verifier)
			if err != nil {
				return fmt.Errorf("%w: %s: %w", ErrCheckpointConflict, e.key, err)
			}
			if c.ahead == nil || o.Size > c.ahead.Size {
				c.ahead = o
			}
			return nil // another instance is further on
		}
		if e.size == cp.Size && string(v.Value()) == string(cp.Note) {
			return nil // another instance signed the same
		}
		if err := Extends(cp, v.Value(), c.key, hashes); err != nil {
			return fmt.Errorf("%s: %w", e.key, err)
		}
	}
	return fmt.Errorf("publish checkpoint %s: the bucket keeps changing", e.key)
}

// Waiting reports whether a deployment checkpoint beyond the log waits to
// be checked.
func (c *Checkpoints) Waiting() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ahead != nil
}

// CheckAhead checks, once the log holds size leaves, the deployment's
// checkpoint that was beyond it: the log's root at that checkpoint's size
// must be its root (ErrCheckpointConflict, a fork, otherwise).
func (c *Checkpoints) CheckAhead(size int64, hashes tlog.HashReader) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ahead == nil || c.ahead.Size > size {
		return nil
	}
	cp := c.ahead
	c.ahead = nil
	root, err := tlog.TreeHash(cp.Size, hashes)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpointConflict, err)
	}
	if root != cp.Root {
		return fmt.Errorf("%w: the deployment's checkpoint of %d leaves has another root than this log's at that size (%s)", ErrCheckpointConflict, cp.Size, audit.Fork)
	}
	return nil
}

// Extends checks that the log whose checkpoint is cp, with stored hashes
// read by hashes, extends the checkpoint note other.
func Extends(cp *audit.Checkpoint, other []byte, key *audit.Key, hashes tlog.HashReader) error {
	o, err := audit.OpenCheckpoint(other, key.Verifier)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpointConflict, err)
	}
	if o.Size > cp.Size {
		return fmt.Errorf("%w: it covers %d leaves, the log %d (%s)", ErrCheckpointConflict, o.Size, cp.Size, audit.Rollback)
	}
	root, err := tlog.TreeHash(o.Size, hashes)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpointConflict, err)
	}
	if root != o.Root {
		return fmt.Errorf("%w: its root at %d differs from the log's (%s)", ErrCheckpointConflict, o.Size, audit.Fork)
	}
	return nil
}
