package producers

import (
	"context"
	"errors"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/nats-io/nats.go"
)

// Auditor reads the audit log over NATS: leaves, checkpoints and op
// proofs. It trusts nothing it reads: audit.Verify recomputes the tree from
// the leaves and checks every checkpoint with the verifier key, and
// audit.CheckProof checks a proof with the key alone.
type Auditor struct {
	nc *nats.Conn
	// Timeout bounds each request when ctx has no deadline.
	Timeout time.Duration
}

// NewAuditor returns an auditor on nc.
func NewAuditor(nc *nats.Conn) *Auditor { return &Auditor{nc: nc, Timeout: DefaultQueryTimeout} }

func (a *Auditor) query(ctx context.Context, subject string, in, out any) error {
	resp, err := request(ctx, a.nc, subject, in, a.Timeout)
	if err != nil {
		return err
	}
	return decodeResponse(resp, out)
}

// Leaves returns a page of leaves from index from on.
func (a *Auditor) Leaves(ctx context.Context, from int64, limit int) (*events.AuditLeaves, error) {
	var out events.AuditLeaves
	err := a.query(ctx, events.QueryAuditLeavesSubject, events.AuditPage{From: from, Limit: limit}, &out)
	return &out, err
}

// Checkpoints returns a page of stored checkpoints of size from on.
func (a *Auditor) Checkpoints(ctx context.Context, from int64, limit int) (*events.AuditCheckpoints, error) {
	var out events.AuditCheckpoints
	err := a.query(ctx, events.QueryAuditCheckpointsSubject, events.AuditPage{From: from, Limit: limit}, &out)
	return &out, err
}

// Proof returns the op's proof file. An op whose newest events are not
// under a checkpoint yet is retried until ctx ends.
func (a *Auditor) Proof(ctx context.Context, opID string) ([]byte, error) {
	for {
		resp, err := request(ctx, a.nc, events.QueryAuditProofSubject, events.OpQuery{OpID: opID}, a.Timeout)
		if err != nil {
			return nil, err
		}
		if resp.Header.Get("Nats-Service-Error-Code") == "" {
			return resp.Data, nil
		}
		err = decodeResponse(resp, nil)
		var e *events.Error
		if !errors.As(err, &e) || !e.Retryable || e.Code != events.CodeNotFound {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}
