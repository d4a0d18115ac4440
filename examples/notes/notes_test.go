package notes_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"example.com/airlock-examples/notes"
	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/consumers/executor/conformance"
	"github.com/airlock-dev/airlock/events"
)

// Airlock's conformance suite, run against an executor from outside.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Harness{
		Repeat: conformance.RepeatReplays,
		New: func(t *testing.T) conformance.Fixture {
			dir := t.TempDir()
			return conformance.Fixture{
				Executor: notes.New(dir),
				Call: func(i int) executor.Call {
					req := events.Request{Workspace: "w", Agent: "a", Tool: "note", Args: json.RawMessage(fmt.Sprintf(`{"line":"note %d"}`, i))}
					_, op := req.Identity()
					return executor.Call{OpID: op, Workspace: "w", Agent: "a", Args: req.Args}
				},
				Effects: func(c executor.Call) int {
					b, _ := os.ReadFile(filepath.Join(dir, "notes.txt"))
					var a struct{ Line string }
					_ = json.Unmarshal(c.Args, &a)
					return strings.Count(string(b), a.Line+"\n")
				},
			}
		},
		Bad: []conformance.Bad{{Name: "no line", Call: conformance.Args(`{}`), Code: events.CodeInvalidArgs}},
	})
}
