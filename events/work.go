package events

// WorkItem tells the executors of one tool that an op is ready. It is plain
// JSON on airlock.v1.work.<ws>.<tool>, at least once: the claim on the op's
// subject, not the work item, makes execution happen once.
type WorkItem struct {
	OpID      string `json:"op_id"`
	Workspace string `json:"workspace"`
	Agent     string `json:"agent"`
	Tool      string `json:"tool"`
	// RequestSeq locates the tool.requested message that carries the args.
	RequestSeq uint64 `json:"request_seq"`
	// ReadySeq is the op subject's sequence when it became ready: the
	// expected last sequence of the claim.
	ReadySeq uint64 `json:"ready_seq"`
}

// Reply is what the gate sends to a request's Airlock-Reply-To inbox: the op
// the request resolved to, or the code it was rejected with.
type Reply struct {
	OpID  string `json:"op_id,omitempty"`
	State State  `json:"state,omitempty"`
	// Existing is true when the request was a retry of an op that already
	// existed (within the dedupe window or long after it).
	Existing bool   `json:"existing,omitempty"`
	Code     Code   `json:"code,omitempty"`
	Message  string `json:"message,omitempty"`
}
