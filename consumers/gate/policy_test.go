package gate_test

import "github.com/airlock-dev/airlock/internal/policy"

func policyLocked() policy.Spec {
	return policy.Spec{
		Tools:      map[string]string{"writer": "write"},
		Workspaces: map[string]policy.WorkspaceSpec{"vault": {Mode: "locked"}, "open": {Mode: "auto"}},
	}
}
