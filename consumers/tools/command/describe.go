package command

import (
	"encoding/json"
	"fmt"

	"github.com/airlock-dev/airlock/consumers/executor"
)

// Describe says what an exec call does and the shape of its args
// (ParseArgs is the authority; the schema says the same).
func (e *Exec) Describe() executor.Description {
	schema := map[string]any{
		"type":                 "object",
		"additionalProperties": false,
		"required":             []string{"argv"},
		"properties": map[string]any{
			"argv": map[string]any{
				"type": "array", "minItems": 1, "maxItems": MaxArgv,
				"items":       map[string]any{"type": "string"},
				"description": "the program and its arguments; argv[0] is run directly, never through a shell",
			},
			"timeout_ms": map[string]any{
				"type": "integer", "minimum": 1, "maximum": e.cfg.MaxTimeout.Milliseconds(),
				"description": fmt.Sprintf("the call's timeout in milliseconds; default %d", e.cfg.DefaultTimeout.Milliseconds()),
			},
		},
	}
	b, _ := json.Marshal(schema)
	return executor.Description{
		Text: "Runs a program (argv, no shell) once in the workspace root and returns its exit code, stdout and stderr. " +
			"The call may be held until a person approves it; a call that may have run but whose outcome is unknown ends ambiguous and is never run again.",
		InputSchema: b,
	}
}
