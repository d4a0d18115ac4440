package policy

import "time"

// Limits of a policy. Each is enforced by [New] (or [Parse] and [Load] for
// the file size) and documented in docs/policy.md.
const (
	// MaxPolicyBytes bounds a policy file.
	MaxPolicyBytes = 1 << 20
	// MaxRules bounds the number of rules.
	MaxRules = 256
	// MaxRuleWhenBytes bounds a rule's CEL expression.
	MaxRuleWhenBytes = 4096
	// MaxRuleReasonBytes bounds a rule's reason.
	MaxRuleReasonBytes = 1024
	// MaxRuleNameBytes bounds a rule's name, which matches
	// [a-z0-9][a-z0-9_-]{0,63}.
	MaxRuleNameBytes = 64
	// MaxRootBytes bounds a workspace's root.
	MaxRootBytes = 4096
	// RuleCostLimit bounds the runtime cost of evaluating one rule on one
	// request, in CEL cost units (about one per operation; string and list
	// operations cost in proportion to their size). A rule over the limit
	// stops with an error and fails closed.
	RuleCostLimit = 100_000

	// DefaultHoldTTL is how long a hold waits for an approver unless the
	// policy says otherwise.
	DefaultHoldTTL = 15 * time.Minute
	// MinHoldTTL and MaxHoldTTL bound hold_ttl.
	MinHoldTTL = time.Second
	MaxHoldTTL = 30 * 24 * time.Hour
)
