package testexec_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/testexec"
	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/consumers/executor/conformance"
	"github.com/airlock-dev/airlock/events"
)

// Counter's effect is the record Dir/<op id>, created once (O_EXCL). A
// second execution of an op fails and notes the op in Dir/DOUBLE, the
// alarm crash tests read; it does not create the record again, so it
// counts as refused.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Harness{
		New: func(t *testing.T) conformance.Fixture {
			c := &testexec.Counter{Dir: t.TempDir()}
			return conformance.Fixture{
				Executor: c,
				Call: func(i int) executor.Call {
					return executor.Call{OpID: conformance.OpID(), Workspace: "w", Agent: "bot", Args: fmt.Appendf(nil, `{"i":%d}`, i)}
				},
				Effects: func(call executor.Call) int {
					_, err := os.Stat(filepath.Join(c.Dir, call.OpID))
					if errors.Is(err, fs.ErrNotExist) {
						return 0
					}
					require.NoError(t, err)
					return 1
				},
			}
		},
		// Its records are shared by every instance.
		RecoversElsewhere: true,
		Repeat:            conformance.RepeatRefused,
		Limits: []conformance.Limit{{
			Name: "args at MaxArgsBytes",
			Call: func(c executor.Call) executor.Call {
				const frame = len(`{"pad":""}`)
				c.Args = json.RawMessage(`{"pad":"` + strings.Repeat("x", events.MaxArgsBytes-frame) + `"}`)
				return c
			},
		}},
	})
}
