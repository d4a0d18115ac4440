package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/stretchr/testify/assert"
)

// returning is an executor whose result or error the test sets.
type returning struct {
	name   string
	result json.RawMessage
	err    error
}

func (r *returning) Tool() string        { return r.name }
func (r *returning) Class() events.Class { return events.ClassRead }
func (r *returning) Execute(context.Context, executor.Call) (json.RawMessage, error) {
	return r.result, r.err
}
func (r *returning) Recover(context.Context, executor.Call, executor.Lost) (executor.Recovery, error) {
	return executor.Recovery{Action: executor.Rerun}, nil
}

// Every way a call can end is stored as its op's one terminal event, with
// the code the contract names.
func TestOutcomes(t *testing.T) {
	big := json.RawMessage(`"` + strings.Repeat("z", events.MaxResultBytes) + `"`)
	cases := []struct {
		name string
		ex   *returning
		want events.Type
		code events.Code
	}{
		{"result", &returning{name: "ok", result: json.RawMessage(` { "a" : 1 } `)}, events.TypeCompleted, ""},
		{"no result", &returning{name: "empty"}, events.TypeCompleted, ""},
		{"coded error", &returning{name: "coded", err: events.Errorf(events.CodeCapabilityDenied, "no")}, events.TypeFailed, events.CodeCapabilityDenied},
		{"plain error", &returning{name: "plain", err: errors.New("boom")}, events.TypeFailed, events.CodeExecutorFailed},
		{"result not JSON", &returning{name: "notjson", result: json.RawMessage(`{nope`)}, events.TypeFailed, events.CodeExecutorFailed},
		{"result over the limit", &returning{name: "big", result: big}, events.TypeFailed, events.CodeResultTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := testenv.StartNATS(t, streams.Config{})
			op, _ := readyOp(t, n, tc.ex.name, `{}`)
			next := replies(t, n, op)
			runRunner(t, n, tc.ex)
			last := lastEvent(t, n.JetStream, op)
			assert.Equal(t, tc.want, last.Type)
			// The started event claims the op before the call.
			assert.Equal(t, []events.Type{events.TypeDecided, events.TypeStarted, tc.want}, testenv.OpEvents(t, n.JetStream, "rec", op))
			switch d := last.Data.(type) {
			case *events.Completed:
				want := `{"a":1}`
				if tc.ex.result == nil {
					want = `null`
				}
				assert.Equal(t, events.Digest([]byte(want)), d.ResultDigest)
				assert.Equal(t, len(want), d.ResultBytes)
				// The result is in the reply only, compacted.
				r := next()
				assert.Equal(t, events.StateCompleted, r.State)
				assert.Equal(t, want, string(r.Result))
				assert.Equal(t, d.ResultDigest, r.ResultDigest)
				assert.Equal(t, d.ResultBytes, r.ResultBytes)
			case *events.Failed:
				assert.Equal(t, tc.code, d.Code)
				assert.NotEmpty(t, d.Message)
				assert.NotContains(t, d.Message, "nope", "no piece of the output in the stored message")
				r := next()
				assert.Equal(t, events.StateFailed, r.State)
				assert.Nil(t, r.Result)
			}
		})
	}
}
