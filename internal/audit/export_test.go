package audit

// CheckLeaf exposes the verifier's light leaf check to tests.
var CheckLeaf = checkLeaf
