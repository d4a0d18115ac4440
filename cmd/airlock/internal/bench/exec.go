package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/producers"
)

// execWorkspace is the workspace of the exec phase; its root is a
// directory of the run.
const execWorkspace = "bench-exec"

// execConcurrency is how many exec ops (and bare fork/execs), and how
// many holds, run at once.
const execConcurrency = 16

// execs runs cfg.Execs exec ops of /bin/true through the pipeline, then as
// many bare fork/execs of /bin/true in root, both execConcurrency at a
// time, and reports both rates and their ratio.
func execs(ctx context.Context, cfg Config, c *producers.Client, root string, res *Result) error {
	args := json.RawMessage(`{"argv":["/bin/true"]}`)
	took, err := parallel(ctx, cfg.track(PhaseExec, cfg.Execs), execConcurrency, cfg.Execs, func(i int) error {
		out, err := c.Submit(ctx, events.Request{
			Workspace: execWorkspace, Agent: "bench", Tool: "exec", Args: args,
			IdempotencyKey: fmt.Sprintf("exec-%d", i),
		})
		if err != nil {
			return err
		}
		if out.State != events.StateCompleted {
			return fmt.Errorf("exec op %s is %s: %s %s", out.OpID, out.State, out.Code, out.Message)
		}
		return nil
	})
	if err != nil {
		return err
	}
	bare, err := parallel(ctx, cfg.track(PhaseForkExec, cfg.Execs), execConcurrency, cfg.Execs, func(int) error {
		cmd := exec.CommandContext(ctx, "/bin/true")
		cmd.Dir = root
		return cmd.Run()
	})
	if err != nil {
		return err
	}
	res.Execs, res.ExecConcurrency = cfg.Execs, execConcurrency
	res.ExecOpsPerS = float64(cfg.Execs) / took.Seconds()
	res.ForkExecPerS = float64(cfg.Execs) / bare.Seconds()
	res.ExecOverhead = res.ForkExecPerS / res.ExecOpsPerS
	return nil
}

// parallel runs f(0..n-1), concurrency at a time, counting each that
// returns on m (nil for none), and returns how long it took, and the first
// error, or ctx's when it ended first. It ends m.
func parallel(ctx context.Context, m *meter, concurrency, n int, f func(i int) error) (time.Duration, error) {
	defer m.end()
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				m.add(1)
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return took, firstErr
}
