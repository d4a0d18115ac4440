package policy

import "sync"

// defaultSpec is the spec of the built-in policy: echo reads, exec
// executes, apply_patch writes and remote talks to the network, every
// workspace is in mode auto, holds wait 15 minutes, and one rule holds an
// exec whose argv runs rm for an approver.
func defaultSpec() Spec {
	return Spec{
		Tools: map[string]string{
			"echo":        string(ClassRead),
			"exec":        string(ClassExec),
			"apply_patch": string(ClassWrite),
			"remote":      string(ClassNetwork),
		},
		DefaultMode: string(ModeAuto),
		Rules: []RuleSpec{{
			Name: "hold-exec-rm",
			When: `tool == "exec" && type(args) == map && has(args.argv) && type(args.argv) == list && ` +
				`args.argv.exists(a, type(a) == string && a.matches(r'(^|[\s/;&|(])rm(\s|$)'))`,
			Action: string(Hold),
			Reason: "exec runs rm: an approver must agree",
		}},
		HoldTTL: DefaultHoldTTL.String(),
	}
}

var defaultPolicy = sync.OnceValue(func() *Policy { return MustNew(defaultSpec()) })

// Default is the built-in policy used when no policy file is given (see
// docs/policy.md). It is built once; the same immutable *Policy is returned
// to every caller.
func Default() *Policy { return defaultPolicy() }
