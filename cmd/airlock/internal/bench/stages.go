package bench

import (
	"context"
	"slices"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// Stages splits an echo op's latency at the records the server stored
// for it, medians over the ops read, in milliseconds: from the submit to
// the started event (the request stored, delivered to the gate, the op
// started), on to the result kept, on to the completed event, and from
// it to the submitter's answer. The clocks are one process's.
type Stages struct {
	Ops                 int     `json:"ops"`
	ToStartedMS         float64 `json:"to_started_ms"`
	StartedToResultMS   float64 `json:"started_to_result_ms"`
	ResultToCompletedMS float64 `json:"result_to_completed_ms"`
	CompletedToAnswerMS float64 `json:"completed_to_answer_ms"`
}

// maxStageOps bounds the ops Stages reads back: three reads each, after
// the phase and untimed.
const maxStageOps = 400

// stages reads back the records of the ops prefix-0 .. prefix-(n-1),
// started at starts and answered lat later, and returns the medians of
// their stages; nil when none could be read (results not kept, a
// stream unreadable).
func stages(ctx context.Context, js jetstream.JetStream, prefix string, starts []time.Time, lat []time.Duration) *Stages {
	ops, err := js.Stream(ctx, streams.Ops)
	if err != nil {
		return nil
	}
	results, err := js.Stream(ctx, streams.Results)
	if err != nil {
		return nil
	}
	stored := func(st jetstream.Stream, subject string) (time.Time, bool) {
		raw, err := st.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			return time.Time{}, false
		}
		return raw.Time, true
	}
	// The completed event names its result by sequence.
	completedAndResult := func(ws, op, tool string) (completed, result time.Time, ok bool) {
		raw, err := ops.GetLastMsgForSubject(ctx, events.OpEventSubject(ws, op, tool, events.TypeCompleted))
		if err != nil {
			return completed, result, false
		}
		_, _, data, err := events.DecodeStored(raw.Header, raw.Data)
		c, isCompleted := data.(*events.Completed)
		if err != nil || !isCompleted || c.ResultSeq == 0 {
			return completed, result, false
		}
		kept, err := results.GetMsg(ctx, c.ResultSeq)
		if err != nil {
			return completed, result, false
		}
		return raw.Time, kept.Time, true
	}
	var toStarted, toResult, toCompleted, toAnswer []time.Duration
	step := max(1, len(starts)/maxStageOps)
	for i := 0; i < len(starts); i += step {
		req := benchRequest(prefix, i)
		_, op := req.Identity()
		started, ok1 := stored(ops, events.OpEventSubject(req.Workspace, op, req.Tool, events.TypeStarted))
		completed, result, ok2 := completedAndResult(req.Workspace, op, req.Tool)
		if !ok1 || !ok2 {
			continue
		}
		toStarted = append(toStarted, started.Sub(starts[i]))
		toResult = append(toResult, result.Sub(started))
		toCompleted = append(toCompleted, completed.Sub(result))
		toAnswer = append(toAnswer, starts[i].Add(lat[i]).Sub(completed))
	}
	if len(toStarted) == 0 {
		return nil
	}
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return ms(d[len(d)/2])
	}
	return &Stages{
		Ops: len(toStarted), ToStartedMS: median(toStarted), StartedToResultMS: median(toResult),
		ResultToCompletedMS: median(toCompleted), CompletedToAnswerMS: median(toAnswer),
	}
}
