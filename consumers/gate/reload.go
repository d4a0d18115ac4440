package gate

import (
	"context"
	"errors"
	"fmt"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/nats-io/nats.go/jetstream"
)

// SetPolicy makes p the policy of every decision from now on (new requests
// and resumes) and records it as a policy.loaded event. A policy whose hash
// is the one in force is only recorded if it was not recorded yet.
func (g *Gate) SetPolicy(ctx context.Context, p *policy.Policy, source string) error {
	if p == nil {
		return errors.New("gate: nil policy")
	}
	g.policy.Store(p)
	g.source.Store(&source)
	if g.ops == nil {
		return nil // Run records it when it starts
	}
	return g.recordPolicy(ctx, p, source)
}

// recordPolicy appends a policy.loaded event unless the newest one already
// names p's hash. The append expects the newest one it read, so that
// processes starting together with one policy record it once; one that
// loses reads the winner's and tries again only if it names another hash.
func (g *Gate) recordPolicy(ctx context.Context, p *policy.Policy, source string) error {
	for {
		prev, prevSeq := "", uint64(0)
		raw, err := g.ops.GetLastMsgForSubject(ctx, events.PolicySubject)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return fmt.Errorf("gate: last policy: %w", err)
		default:
			prevSeq = raw.Sequence
			if _, _, data, err := events.DecodeStored(raw.Header, raw.Data); err == nil {
				if pl, ok := data.(*events.PolicyLoaded); ok {
					prev = pl.Hash
				}
			}
		}
		if prev == p.Hash() {
			return nil
		}
		ev := &events.PolicyLoaded{Hash: p.Hash(), PreviousHash: prev, Source: source, Warnings: p.Warnings()}
		seq, err := g.record(ctx, events.PolicySubject, events.TypePolicyLoaded, "", ev, jetstream.WithExpectLastSequencePerSubject(prevSeq))
		if oplog.IsConflict(err) {
			continue // another gate recorded one since the read
		}
		if err != nil {
			return fmt.Errorf("gate: %w", err)
		}
		g.cfg.Logger.Info("policy loaded", "hash", p.Hash(), "previous", prev, "source", source, "seq", seq)
		return nil
	}
}
