package executor

import (
	"context"
	"encoding/json"

	"github.com/airlock-dev/airlock/events"
)

// Echo returns its args as its result. It has no side effect, so a lost
// attempt simply runs again. It exists to exercise and measure the path.
type Echo struct{}

// Tool is "echo".
func (Echo) Tool() string { return "echo" }

// Class is read.
func (Echo) Class() events.Class { return events.ClassRead }

// Execute returns c.Args.
func (Echo) Execute(_ context.Context, c Call) (json.RawMessage, error) {
	return c.Args, nil
}

// Recover reruns: echo has no effect to repeat.
func (Echo) Recover(context.Context, Call, Lost) (Recovery, error) {
	return Recovery{Action: Rerun}, nil
}

var _ Executor = Echo{}

// Describe says that echo returns its args.
func (Echo) Describe() Description {
	return Description{Text: "Returns its args unchanged. Runs no program and touches nothing; for trying Airlock out.", InputSchema: events.AnyObjectSchema}
}
