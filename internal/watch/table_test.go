package watch_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/watch"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run with -update to create it")
	assert.Equal(t, string(want), got)
}

var start = time.Date(2026, 3, 4, 5, 0, 0, 0, time.UTC)

func hold(ws, op, tool, agent, reason string, created time.Time, ttl time.Duration) *events.Op {
	exp := created.Add(ttl)
	return &events.Op{ID: op, Workspace: ws, State: events.StateHeld, Agent: agent, Tool: tool, HoldID: events.HoldID(op),
		HoldExpiresAt: &exp, Reason: reason, CreatedAt: created, UpdatedAt: created}
}

func outcome(at time.Duration, ws, op, tool, kind string, mutate func(*watch.Event)) watch.Event {
	e := watch.Event{Time: start.Add(at), Kind: kind, Workspace: ws, OpID: op, Tool: tool}
	if kind != watch.Rejected {
		e.State = events.State(kind)
	}
	if mutate != nil {
		mutate(&e)
	}
	return e
}

// fixture is a table with two holds and outcomes of every kind, seen at
// now, and an undecodable message: counted, not an outcome.
func fixture() (*watch.Table, time.Time) {
	now := start.Add(5*time.Minute + 30*time.Second)
	tbl := watch.NewTable("nats://127.0.0.1:4222", "", start)
	ms, n, size := int64(3), 17, 12
	for _, e := range []watch.Event{
		{Time: start.Add(time.Second), Kind: "decided", State: events.StateReady},
		outcome(2*time.Second, "demo", opA, "echo", "completed", func(e *watch.Event) {
			e.Attempt, e.DurationMS, e.ResultBytes = "att1", &ms, &n
		}),
		outcome(3*time.Second, "demo", opB, "format_disk", "denied", func(e *watch.Event) {
			e.Code, e.Agent, e.Reason = events.CodeCapabilityDenied, "agent", "class destructive is not allowed in mode auto"
		}),
		{Time: start.Add(4 * time.Second), Kind: "held", State: events.StateHeld},
		outcome(4*time.Minute, "review", "op_11111111111111111111111111111111", "count", "denied", func(e *watch.Event) {
			e.Code, e.Approver, e.HoldID, e.Reason = events.CodeApprovalDenied, "approver", events.HoldID("op_11111111111111111111111111111111"), "too big"
		}),
		outcome(5*time.Minute, "demo", "", "", watch.Rejected, func(e *watch.Event) {
			e.Code, e.RequestSubject, e.Size, e.Message = events.CodeInvalidEvent, "airlock.v1.req.demo.agent", &size, "not a CloudEvent: \x1b[2Jno ce-specversion header"
		}),
		outcome(5*time.Minute+time.Second, "demo", opA, "echo", watch.Undecodable, func(e *watch.Event) {
			e.State, e.Subject, e.Error = "", events.OpEventSubject("demo", opA, "echo", events.TypeCompleted), "not a CloudEvent"
		}),
	} {
		tbl.Add(e)
	}
	tbl.SetHolds([]*events.Op{
		hold("review", "op_22222222222222222222222222222222", "count", "agent", "mode confirm holds write", start.Add(-2*time.Hour), 3*time.Hour),
		hold("review", "op_33333333333333333333333333333333", "deploy", "ci-bot", "big\tbatch", start.Add(5*time.Minute), 10*time.Minute),
	}, nil)
	return tbl, now
}

func TestTableRender(t *testing.T) {
	tbl, now := fixture()
	golden(t, "table.golden", tbl.Render(now, 0, 0))

	// Cut to a small terminal: the lines to its width, the rows to its
	// height.
	small := tbl.Render(now, 60, 12)
	golden(t, "table-small.golden", small)
	lines := strings.Split(strings.TrimSuffix(small, "\n"), "\n")
	assert.LessOrEqual(t, len(lines), 12)
	for _, l := range lines {
		assert.LessOrEqual(t, len([]rune(l)), 60, l)
	}
}

func TestTableEmptyAndErrors(t *testing.T) {
	tbl := watch.NewTable("nats://h:4222", "review", start)
	out := tbl.Render(start.Add(time.Second), 0, 0)
	assert.Equal(t, "airlock watch  nats://h:4222  workspace review  2026-03-04 05:00:01Z\n"+
		"since 05:00:00Z:  decided 0  held 0  granted 0  completed 0  failed 0  denied 0  expired 0  ambiguous 0  rejected 0\n"+
		"\n"+
		"PENDING HOLDS  0\n"+
		"  none\n"+
		"\n"+
		"RECENT OUTCOMES  last 0 of at most 20, newest first\n"+
		"  none yet\n", out)

	// A failed query keeps the holds last listed and says so; the
	// status and drops show under the title.
	tbl.SetHolds([]*events.Op{hold("review", opA, "count", "agent", "r", start, time.Minute)}, nil)
	tbl.SetHolds(nil, errors.New("UNAVAILABLE: no responders"))
	tbl.SetStatus("disconnected: reconnecting")
	tbl.SetDropped(3)
	out = tbl.Render(start.Add(2*time.Minute), 0, 0)
	assert.Contains(t, out, "\n! disconnected: reconnecting\n")
	assert.Contains(t, out, "  DROPPED 3\n")
	assert.Contains(t, out, "PENDING HOLDS  1  (query failed, as of the last answer: UNAVAILABLE: no responders)\n")
	assert.Contains(t, out, events.HoldID(opA)+"  2m00s  expiring")
	tbl.SetHolds(nil, nil)
	tbl.SetStatus("")
	assert.NotContains(t, tbl.Render(start, 0, 0), "!")
}

func TestTableKeepsTheNewestOutcomes(t *testing.T) {
	tbl := watch.NewTable("s", "", start)
	for i := range watch.MaxRecent + 5 {
		changesHolds := tbl.Add(outcome(time.Duration(i)*time.Second, "demo", fmt.Sprintf("op_%032x", i), "echo", "expired", nil))
		assert.True(t, changesHolds, "an expiry ends a hold")
	}
	assert.False(t, tbl.Add(watch.Event{Kind: "claimed", State: events.StateExecuting}))
	// Undecodable messages, which anyone who may send a request can aim
	// at a live subject, are counted but push no outcome out of view.
	for i := range 2 * watch.MaxRecent {
		assert.False(t, tbl.Add(outcome(time.Hour+time.Duration(i)*time.Second, "demo", fmt.Sprintf("op_%032x", 100+i), "echo", watch.Undecodable, func(e *watch.Event) {
			e.State, e.Error = "", "not a message AIRLOCK_OPS stored"
		})))
	}
	out := tbl.Render(start.Add(time.Hour), 0, 0)
	assert.Contains(t, out, "expired 25")
	assert.Contains(t, out, "  undecodable 40\n")
	assert.NotContains(t, out, fmt.Sprintf("op_%032x", 100))
	assert.NotContains(t, out, "AIRLOCK_OPS")
	assert.Contains(t, out, "last 20 of at most 20")
	assert.Contains(t, out, fmt.Sprintf("op_%032x", watch.MaxRecent+4))
	assert.NotContains(t, out, fmt.Sprintf("op_%032x", 4))
	assert.Contains(t, out, fmt.Sprintf("op_%032x", 5))
	// Newest first.
	assert.Less(t, strings.Index(out, fmt.Sprintf("op_%032x", 24)), strings.Index(out, fmt.Sprintf("op_%032x", 23)))
}

func TestShort(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second:                          "0s",
		0:                                     "0s",
		45*time.Second + 900*time.Millisecond: "45s",
		3*time.Minute + 4*time.Second:         "3m04s",
		2*time.Hour + 5*time.Minute + 59*time.Second: "2h05m",
		76 * time.Hour: "3d04h",
	} {
		assert.Equal(t, want, watch.Short(d), d.String())
	}
}

func TestFrame(t *testing.T) {
	assert.Equal(t, "\x1b[Ha\x1b[K\r\nb\x1b[K\x1b[J", watch.Frame("a\nb\n"))
	assert.Equal(t, "\x1b[H\x1b[K\x1b[J", watch.Frame(""))
}
