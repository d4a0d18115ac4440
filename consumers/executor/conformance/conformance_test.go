package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/consumers/executor/conformance"
	"github.com/airlock-dev/airlock/events"
)

// faultEnv names the fault TestFaulty injects; unset, it is skipped.
const faultEnv = "AIRLOCK_CONFORMANCE_FAULT"

// TestSuiteCatchesFaults runs the suite, in a child process each, on an
// executor with one fault, and checks it fails exactly where it should;
// the control has none and must pass. A suite that cannot fail proves
// nothing.
func TestSuiteCatchesFaults(t *testing.T) {
	tests := []struct {
		fault string
		run   string   // -test.run of the child, narrowed for slow faults
		fails []string // subtests that must fail
	}{
		// First: it takes Prompt and more, the others run beside it.
		{fault: "ignores-cancel", run: "^TestFaulty$/^cancel$/^deadline$", fails: []string{"cancel/deadline"}},
		{fault: "none"},
		{fault: "done-for-never-ran", fails: []string{"recover/never-ran"}},
		{fault: "rerun-after-completion", fails: []string{"recover/completed", "concurrency"}},
		{fault: "recover-has-effect", fails: []string{"recover/never-ran", "recover/completed"}},
		{fault: "result-differs-on-recover", fails: []string{"recover/completed", "concurrency"}},
		{fault: "effect-twice", fails: []string{"result", "concurrency"}},
		{fault: "oversized-result", fails: []string{"result"}},
		{fault: "refusal-not-coded", fails: []string{"bad/no_i"}},
		{fault: "effect-before-refusal", fails: []string{"bad/no_i"}},
		{fault: "repeat-misdeclared", fails: []string{"second-attempt"}},
		{fault: "done-after-cancel", fails: []string{"cancel/running", "cancel/deadline"}},
		{fault: "rerun-after-cancel", fails: []string{"cancel/running"}},
		{fault: "known-stale", fails: []string{""}},
		{fault: "rerun-elsewhere", fails: []string{"recover/elsewhere-never-ran"}},
	}
	for _, tt := range tests {
		t.Run(tt.fault, func(t *testing.T) {
			if tt.fault == "ignores-cancel" && testing.Short() {
				t.Skip("takes longer than conformance.Prompt")
			}
			t.Parallel()
			run := tt.run
			if run == "" {
				run = "^TestFaulty$"
			}
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run="+run, "-test.count=1")
			cmd.Env = append(os.Environ(), faultEnv+"="+tt.fault)
			out, err := cmd.CombinedOutput()
			if len(tt.fails) == 0 {
				require.NoError(t, err, "the suite failed an executor without a fault:\n%s", out)
				return
			}
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "the suite passed an executor with fault %s:\n%s", tt.fault, out)
			for _, name := range tt.fails {
				assert.Contains(t, string(out), "--- FAIL: "+strings.TrimSuffix("TestFaulty/"+name, "/"), "output:\n%s", out)
			}
		})
	}
}

// TestFaulty is the child of TestSuiteCatchesFaults.
func TestFaulty(t *testing.T) {
	fault := os.Getenv(faultEnv)
	if fault == "" {
		t.Skip("run by TestSuiteCatchesFaults")
	}
	h := conformance.Harness{
		New: func(*testing.T) conformance.Fixture {
			e := &memo{fault: fault, runs: map[string]int{}, started: map[string]bool{}, done: map[string]json.RawMessage{}}
			call := func(args string) executor.Call {
				return executor.Call{OpID: conformance.OpID(), Workspace: "w", Agent: "a", Args: json.RawMessage(args)}
			}
			return conformance.Fixture{
				Executor: e,
				Call:     func(i int) executor.Call { return call(fmt.Sprintf(`{"i":%d}`, i)) },
				Slow:     func(i int) executor.Call { return call(fmt.Sprintf(`{"i":%d,"slow":true}`, i)) },
				Effects:  e.effects,
			}
		},
		Repeat: conformance.RepeatRuns,
		Bad:    []conformance.Bad{{Name: "no i", Call: conformance.Args(`{"j":1}`), Code: events.CodeInvalidArgs}},
	}
	switch fault {
	case "repeat-misdeclared":
		h.Repeat = conformance.RepeatReplays
	case "known-stale":
		h.Known = map[string]string{"no/such/subtest": "stale"}
	}
	conformance.Run(t, h)
}

// memo is an executor that, without a fault, passes the suite: each call
// counts one run of its op, records its attempt as started before and
// done (with the result) after, and Recover reads the records: done is
// Done, started is Ambiguous, neither is Rerun for its own attempts and
// Defer for another instance's.
type memo struct {
	fault   string
	mu      sync.Mutex
	runs    map[string]int             // by op id
	started map[string]bool            // by attempt
	done    map[string]json.RawMessage // by attempt
}

func (m *memo) Tool() string        { return "memo" }
func (m *memo) Class() events.Class { return events.ClassWrite }

func (m *memo) effects(c executor.Call) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runs[c.OpID]
}

func (m *memo) Execute(ctx context.Context, c executor.Call) (json.RawMessage, error) {
	var a struct {
		I    *int
		Slow bool
	}
	if err := json.Unmarshal(c.Args, &a); err != nil || a.I == nil {
		switch m.fault {
		case "refusal-not-coded":
			return nil, errors.New("no i")
		case "effect-before-refusal":
			m.run(c)
		}
		return nil, events.Errorf(events.CodeInvalidArgs, "no i")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.run(c)
	if m.fault == "effect-twice" {
		m.run(c)
	}
	if a.Slow {
		if m.fault == "ignores-cancel" {
			time.Sleep(conformance.Prompt + time.Second)
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	res := fmt.Appendf(nil, `{"i":%d}`, *a.I)
	if m.fault == "oversized-result" {
		res = []byte(`"` + strings.Repeat("x", events.MaxResultBytes) + `"`)
	}
	m.mu.Lock()
	m.done[c.Attempt] = res
	m.mu.Unlock()
	return res, nil
}

// run records that attempt c started and counts a run of its op.
func (m *memo) run(c executor.Call) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.started[c.Attempt] = true
	m.runs[c.OpID]++
}

func (m *memo) Recover(_ context.Context, c executor.Call, l executor.Lost) (executor.Recovery, error) {
	lost := l.Attempt
	m.mu.Lock()
	defer m.mu.Unlock()
	res, done := m.done[lost]
	switch {
	case m.fault == "recover-has-effect":
		m.runs[c.OpID]++
	case m.fault == "done-for-never-ran" && !m.started[lost]:
		return executor.Recovery{Action: executor.Done, Result: json.RawMessage(`{}`)}, nil
	case m.fault == "rerun-after-completion" && done:
		return executor.Recovery{Action: executor.Rerun}, nil
	case m.fault == "result-differs-on-recover" && done:
		return executor.Recovery{Action: executor.Done, Result: json.RawMessage(`{"other":true}`)}, nil
	case m.fault == "done-after-cancel" && m.started[lost] && !done:
		return executor.Recovery{Action: executor.Done, Result: json.RawMessage(`{"i":1}`)}, nil
	case m.fault == "rerun-after-cancel" && m.started[lost] && !done:
		return executor.Recovery{Action: executor.Rerun}, nil
	}
	switch {
	case done:
		return executor.Recovery{Action: executor.Done, Result: bytes.Clone(res)}, nil
	case m.started[lost]:
		return executor.Recovery{Action: executor.Ambiguous, Known: "started, no result"}, nil
	case !l.Own && m.fault != "rerun-elsewhere":
		// Its records are in this instance's memory: they say nothing
		// of another instance's attempt.
		return executor.Recovery{Action: executor.Defer, Known: "another instance's attempt"}, nil
	}
	return executor.Recovery{Action: executor.Rerun}, nil
}

var _ executor.Executor = (*memo)(nil)
