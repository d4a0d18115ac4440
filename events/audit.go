package events

// The query service's audit log endpoints: a verifier elsewhere reads the
// leaves and checkpoints and recomputes the tree itself; anyone asks for an
// op's proof.
const (
	// QueryAuditLeavesSubject answers an AuditPage with AuditLeaves.
	QueryAuditLeavesSubject = QueryPrefix + ".audit.leaves"
	// QueryAuditCheckpointsSubject answers an AuditPage (From is a size)
	// with AuditCheckpoints.
	QueryAuditCheckpointsSubject = QueryPrefix + ".audit.checkpoints"
	// QueryAuditProofSubject answers an OpQuery with the op's proof file
	// (text, airlock.dev/op-proof/v1).
	QueryAuditProofSubject = QueryPrefix + ".audit.proof"
	// MaxAuditPage bounds the leaves or checkpoints of one answer (a leaf
	// is a few hundred bytes, so a page stays well under 1 MiB).
	MaxAuditPage = 1024
)

// AuditPage asks for up to Limit entries from From on (a leaf index, or a
// checkpoint size). Limit 0 means MaxAuditPage.
type AuditPage struct {
	From  int64 `json:"from"`
	Limit int   `json:"limit,omitempty"`
}

// AuditLeaves is a page of leaves: leaf From+i is Leaves[i]. Size is the
// log's size when the page was read.
type AuditLeaves struct {
	Size   int64    `json:"size"`
	From   int64    `json:"from"`
	Leaves [][]byte `json:"leaves"`
}

// AuditCheckpoints is a page of stored checkpoints in size order; Next is
// the From of the next page, 0 after the last.
type AuditCheckpoints struct {
	Sizes []int64  `json:"sizes"`
	Notes [][]byte `json:"notes"`
	Next  int64    `json:"next,omitempty"`
}
