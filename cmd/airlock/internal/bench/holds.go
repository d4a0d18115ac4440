package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/producers"
	"github.com/nats-io/nats.go"
)

// holdWorkspace is the confirm workspace of the hold phase.
const holdWorkspace = "bench-holds"

// holds submits cfg.Holds ops that the policy holds, grants each, and
// measures from the grant to the completed outcome.
func holds(ctx context.Context, cfg Config, a *app.App, c *producers.Client, res *Result) error {
	nc, err := nats.Connect("", nats.InProcessServer(a.Server))
	if err != nil {
		return err
	}
	defer nc.Close()
	ap, err := producers.NewApprover(nc, "bench")
	if err != nil {
		return err
	}
	lat := make([]time.Duration, cfg.Holds)
	answer := make([]time.Duration, cfg.Holds)
	t0 := time.Now()
	cpu0, _ := processCPU()
	if _, err := parallel(ctx, cfg.track(PhaseHolds, cfg.Holds), execConcurrency, cfg.Holds, func(i int) error {
		var err error
		answer[i], lat[i], err = holdOnce(ctx, c, ap, i)
		return err
	}); err != nil {
		return err
	}
	res.HoldPhaseS = time.Since(t0).Seconds()
	cpu, _ := processCPU()
	res.CPUUSPerHold = float64((cpu - cpu0).Microseconds()) / float64(cfg.Holds)
	slices.Sort(lat)
	slices.Sort(answer)
	res.Holds = cfg.Holds
	res.HoldP50MS = ms(lat[len(lat)/2])
	res.HoldP99MS = ms(lat[len(lat)*99/100])
	res.HeldAnswerP50MS = ms(answer[len(answer)/2])
	res.HeldAnswerP99MS = ms(answer[len(answer)*99/100])
	return nil
}

// holdOnce runs one op through a hold and a grant, and returns the time
// its submit took to be answered APPROVAL_REQUIRED and the time from
// sending the grant to seeing the op completed.
func holdOnce(ctx context.Context, c *producers.Client, ap *producers.Approver, i int) (answer, granted time.Duration, err error) {
	req := events.Request{
		Workspace: holdWorkspace, Agent: "bench", Tool: "echo",
		Args: json.RawMessage(fmt.Sprintf(`{"n":%d,"text":"held by the benchmark"}`, i)),
	}
	t0 := time.Now()
	out, err := c.Submit(ctx, req)
	if err != nil {
		return 0, 0, err
	}
	if !out.Held() {
		return 0, 0, fmt.Errorf("op %s is %s, not held", out.OpID, out.State)
	}
	answer = time.Since(t0)
	t0 = time.Now()
	res := events.Resolution{HoldID: out.HoldID, ArgsDigest: out.ArgsDigest, Decision: events.DecisionGrant, Reason: "benchmark"}
	if _, err := ap.Resolve(ctx, holdWorkspace, res); err != nil {
		return 0, 0, err
	}
	done, err := c.Submit(ctx, req)
	if err != nil {
		return 0, 0, err
	}
	if done.State != events.StateCompleted {
		return 0, 0, fmt.Errorf("op %s is %s after its grant", done.OpID, done.State)
	}
	return answer, time.Since(t0), nil
}
