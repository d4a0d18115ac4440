package patch

import (
	"encoding/json"

	"github.com/airlock-dev/airlock/consumers/executor"
)

// Describe says what an apply_patch call does and the shape of its args.
func (p *Patch) Describe() executor.Description {
	schema := map[string]any{
		"type":                 "object",
		"additionalProperties": false,
		"required":             []string{"patch"},
		"properties": map[string]any{
			"patch": map[string]any{
				"type": "string", "minLength": 1, "maxLength": MaxPatchBytes,
				"description": "a unified diff (git diff or diff -u) of text files under the workspace root",
			},
		},
	}
	b, _ := json.Marshal(schema)
	return executor.Description{
		Text: "Applies a unified diff to files under the workspace root, all files or none, once. " +
			"The call may be held until a person approves it; the approval covers the files as they were when it was asked for, and a file that changed since fails the call.",
		InputSchema: b,
	}
}
