package audit

// CheckLeaf exposes the verifier's light leaf check to tests.
var CheckLeaf = checkLeaf

// CheckLeafOp exposes the check that also returns the op.
var CheckLeafOp = checkLeafOp

// NodeHash exposes the compact ranges' node hash.
var NodeHash = nodeHash
