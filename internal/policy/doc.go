// Package policy decides whether a request runs now, never, or once an
// approver says so: a capability class per tool, a permission mode per
// workspace (optionally per agent), and ordered CEL rules. Every decision
// names the policy it came from by hash.
//
// # Loading
//
// [Parse] reads a policy file (YAML or JSON, see docs/policy.md), [Load]
// reads one from disk, [New] builds one from a [Spec], and [Default] is the
// built-in policy used when no file is given. Unknown keys, duplicate keys,
// bad names, rules that do not compile and values over the limits are
// errors. Classes and modes that do not parse are not errors: they fail
// closed (destructive, locked) and each adds a line to [Policy.Warnings].
//
// # Deciding
//
// [Policy.Decide] applies, in order: the effective mode (an override, the
// agent's mode, the workspace's mode, the default mode); a lockdown, which
// no rule overrides; the rules, first match wins; and finally the class and
// mode. A rule that fails to evaluate fails closed: a deny or hold rule
// matches, an allow rule does not.
//
// # Concurrency
//
// A [Policy] is immutable once built and safe for concurrent use. Slices
// and maps it returns belong to the caller.
package policy
