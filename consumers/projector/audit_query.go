package projector

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/nats-io/nats.go/micro"
	"golang.org/x/mod/sumdb/note"
)

func (q *query) addAudit(svc micro.Service) error {
	for _, e := range []struct {
		name, subject string
		h             micro.HandlerFunc
	}{
		{"audit-leaves", events.QueryAuditLeavesSubject, q.auditLeaves},
		{"audit-checkpoints", events.QueryAuditCheckpointsSubject, q.auditCheckpoints},
		{"audit-proof", events.QueryAuditProofSubject, q.auditProof},
	} {
		if err := svc.AddEndpoint(e.name, e.h, micro.WithEndpointSubject(e.subject)); err != nil {
			return err
		}
	}
	return nil
}

var errPageFull = errors.New("page full")

func auditPage(req micro.Request) (events.AuditPage, bool) {
	var in events.AuditPage
	if len(req.Data()) > 0 {
		if err := json.Unmarshal(req.Data(), &in); err != nil {
			respondError(req, events.Errorf(events.CodeInvalidQuery, "bad audit page: %v", err))
			return in, false
		}
	}
	if in.From < 0 || in.Limit < 0 || in.Limit > events.MaxAuditPage {
		respondError(req, events.Errorf(events.CodeInvalidQuery, "want from >= 0 and limit 0..%d", events.MaxAuditPage))
		return in, false
	}
	if in.Limit == 0 {
		in.Limit = events.MaxAuditPage
	}
	return in, true
}

func (q *query) auditLeaves(req micro.Request) {
	in, ok := auditPage(req)
	if !ok {
		return
	}
	size, err := q.st.LogSize()
	if err != nil {
		respondError(req, err)
		return
	}
	out := events.AuditLeaves{Size: size, From: in.From, Leaves: [][]byte{}}
	err = q.st.Leaves(in.From, func(i int64, leaf []byte) error {
		if len(out.Leaves) == in.Limit || i >= size {
			return errPageFull
		}
		if i != in.From+int64(len(out.Leaves)) {
			// A gap: the page ends before it, and the verifier asking
			// for the missing leaf next finds it missing.
			return errPageFull
		}
		out.Leaves = append(out.Leaves, append([]byte{}, leaf...))
		return nil
	})
	if err != nil && !errors.Is(err, errPageFull) {
		respondError(req, err)
		return
	}
	respond(req, out)
}

func (q *query) auditCheckpoints(req micro.Request) {
	in, ok := auditPage(req)
	if !ok {
		return
	}
	sizes, notes, err := q.st.CheckpointsFrom(in.From, in.Limit+1)
	if err != nil {
		respondError(req, err)
		return
	}
	out := events.AuditCheckpoints{Sizes: sizes, Notes: notes}
	if len(sizes) > in.Limit {
		out.Sizes, out.Notes, out.Next = sizes[:in.Limit], notes[:in.Limit], sizes[in.Limit]
	}
	if out.Sizes == nil {
		out.Sizes, out.Notes = []int64{}, [][]byte{}
	}
	respond(req, out)
}

func (q *query) auditProof(req micro.Request) {
	var in events.OpQuery
	if err := json.Unmarshal(req.Data(), &in); err != nil || !events.ValidOpID(in.OpID) {
		respondError(req, events.Errorf(events.CodeInvalidQuery, "want {\"op_id\": \"op_<32 hex>\"}"))
		return
	}
	var v note.Verifier
	if q.key != nil {
		v = q.key.Verifier
	}
	file, err := BuildProof(q.st, v, in.OpID)
	if err != nil {
		respondError(req, err)
		return
	}
	if events.ValidResponse(req.Reply()) {
		_ = req.Respond(file)
	}
}

// ProofStore is what BuildProof reads.
type ProofStore interface {
	audit.ProofSource
	OpLeaves(op string) ([]int64, error)
	LatestCheckpoint() ([]byte, error)
}

// BuildProof writes the proof file of an op under the newest checkpoint.
// Errors are *events.Error: NOT_FOUND (retryable) when the op has no leaf
// under a checkpoint yet.
func BuildProof(st ProofStore, v note.Verifier, op string) ([]byte, error) {
	if v == nil {
		return nil, events.Errorf(events.CodeUnavailable, "this server signs no checkpoints")
	}
	idx, err := st.OpLeaves(op)
	if err != nil {
		return nil, events.Errorf(events.CodeInternal, "%v", err)
	}
	if len(idx) == 0 {
		return nil, &events.Error{Code: events.CodeNotFound, Message: "no leaves of op " + op, Retryable: true}
	}
	signed, err := st.LatestCheckpoint()
	if err != nil {
		return nil, events.Errorf(events.CodeInternal, "%v", err)
	}
	if signed == nil {
		return nil, &events.Error{Code: events.CodeNotFound, Message: "no checkpoint yet", Retryable: true}
	}
	cp, err := audit.OpenCheckpoint(signed, v)
	if err != nil {
		return nil, events.Errorf(events.CodeInternal, "newest checkpoint: %v", err)
	}
	p, later, err := audit.Prove(st, op, idx, cp)
	if err != nil {
		return nil, events.Errorf(events.CodeInternal, "%v", err)
	}
	if later > 0 {
		// A proof of some of the op's events would read as all of them.
		return nil, &events.Error{Code: events.CodeNotFound, Retryable: true,
			Message: fmt.Sprintf("%d of op %s's %d leaves are not under a checkpoint yet", later, op, len(idx))}
	}
	return p.Marshal(), nil
}
