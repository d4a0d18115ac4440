package projector

import (
	"context"
	"errors"
	"fmt"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/tlog"
)

// ErrCheckpointConflict is returned when the checkpoint kept in JetStream
// is not one this log could have written before: it covers more leaves
// or disagrees with the log's root at its size. Another writer, a
// restored store or a rewritten history: the projector stops.
var ErrCheckpointConflict = errors.New("projector: the checkpoint in JetStream conflicts with the local log")

// Checkpoints keeps the newest checkpoint in the JetStream bucket
// streams.AuditBucket, written with compare-and-swap on the key's revision
// so that a checkpoint never replaces one it does not extend.
type Checkpoints struct {
	kv   jetstream.KeyValue
	key  string
	rev  uint64
	size int64 // of the checkpoint at rev; -1 when unknown
}

// Has reports whether the bucket holds cp already, as far as this process
// knows.
func (c *Checkpoints) Has(cp *audit.Checkpoint) bool { return c.rev != 0 && c.size == cp.Size }

// OpenCheckpoints opens the bucket and reads the newest checkpoint of the
// log with origin, nil when there is none yet.
func OpenCheckpoints(ctx context.Context, js jetstream.JetStream, origin string) (*Checkpoints, []byte, error) {
	kv, err := js.KeyValue(ctx, streams.AuditBucket)
	if err != nil {
		return nil, nil, fmt.Errorf("audit bucket: %w", err)
	}
	c := &Checkpoints{kv: kv, key: streams.AuditCheckpointKey(origin), size: -1}
	e, err := kv.Get(ctx, c.key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return c, nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("audit bucket: %w", err)
	}
	c.rev, c.size = e.Revision(), audit.PeekSize(e.Value())
	return c, e.Value(), nil
}

// Publish stores note as the newest checkpoint. A lost compare-and-swap
// re-reads the bucket: a checkpoint this log extends (one the key signed,
// no larger, with the root the log has at its size) is replaced; anything
// else is ErrCheckpointConflict.
func (c *Checkpoints) Publish(ctx context.Context, cp *audit.Checkpoint, key *audit.Key, hashes tlog.HashReader) error {
	for range 3 {
		var err error
		if c.rev == 0 {
			c.rev, err = c.kv.Create(ctx, c.key, cp.Note)
		} else {
			c.rev, err = c.kv.Update(ctx, c.key, cp.Note, c.rev)
		}
		if err == nil {
			c.size = cp.Size
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return fmt.Errorf("publish checkpoint: %w", err)
		}
		e, gerr := c.kv.Get(ctx, c.key)
		if gerr != nil {
			return fmt.Errorf("publish checkpoint: %w", gerr)
		}
		if err := Extends(cp, e.Value(), key, hashes); err != nil {
			return err
		}
		c.rev, c.size = e.Revision(), -1
	}
	return errors.New("publish checkpoint: the bucket keeps changing")
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
