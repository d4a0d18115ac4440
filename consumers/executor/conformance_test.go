package executor_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/consumers/executor/conformance"
	"github.com/airlock-dev/airlock/events"
)

// Echo has no effect and no state: every attempt may run again.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Harness{
		New: func(*testing.T) conformance.Fixture {
			return conformance.Fixture{
				Executor: executor.Echo{},
				Call: func(i int) executor.Call {
					return executor.Call{OpID: conformance.OpID(), Workspace: "w", Agent: "bot", Args: fmt.Appendf(nil, `{"i":%d}`, i)}
				},
			}
		},
		Repeat:       conformance.RepeatRuns,
		SafeToRepeat: true,
		Limits: []conformance.Limit{{
			Name: "args at MaxArgsBytes",
			Call: func(c executor.Call) executor.Call {
				const frame = len(`{"pad":""}`)
				c.Args = json.RawMessage(`{"pad":"` + strings.Repeat("x", events.MaxArgsBytes-frame) + `"}`)
				return c
			},
			Check: func(t *testing.T, res json.RawMessage, err error) {
				require.NoError(t, err)
				require.Len(t, res, events.MaxArgsBytes, "echo returns its args")
			},
		}},
	})
}
