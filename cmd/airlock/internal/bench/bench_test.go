package bench_test

import (
	"context"
	"runtime/debug"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/bench"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A small run checks the arithmetic of the report, not the speed.
func TestRunReportsConsistentFigures(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var calls []progressCall // Progress is called one at a time
	res, err := bench.Run(ctx, bench.Config{Ops: 300, Concurrency: 16, Warmup: 50, Holds: 20, Execs: 20, AuditLeaves: 3000, Results: 40, Paced: 60, Window: 100, Dir: t.TempDir(),
		Progress: func(phase string, done, total int64) { calls = append(calls, progressCall{phase, done, total}) }})
	require.NoError(t, err)
	assertProgress(t, calls, []progressCall{
		{bench.PhasePipeline, 300, 300}, {bench.PhasePaced, 60, 60}, {bench.PhaseLow, 60, 60}, {bench.PhaseFetch, 40, 40}, {bench.PhaseHolds, 20, 20}, {bench.PhaseExec, 20, 20}, {bench.PhaseForkExec, 20, 20},
		{bench.PhaseRaw, 1200, 1200}, {bench.PhaseRawPaced, 60, 60}, {bench.PhaseSkeleton, 300, 300}, {bench.PhasePipelineNoResults, 300, 300}, {bench.PhasePipelineNoLog, 300, 300},
		{bench.PhaseAuditAppend, 3000, 3000}, {bench.PhaseAuditVerify, 3000, 3000},
	})
	assert.Equal(t, 300, res.Ops)
	assert.Equal(t, 300, res.Completed)
	// The pipeline phase in windows of 100 ops, each with its figures
	// and the memory at its end.
	require.Len(t, res.Windows, 3)
	for i, w := range res.Windows {
		assert.Equal(t, 100*(i+1), w.Ops)
		assert.Greater(t, w.OpsPerS, 0.0)
		assert.Greater(t, w.CPUUSPerOp, 0.0)
		assert.Greater(t, w.P99MS, 0.0)
		assert.Greater(t, w.RSSMB, 0.0)
		assert.GreaterOrEqual(t, w.PeakRSSMB, w.RSSMB)
		assert.Greater(t, w.GoMB, w.HeapLiveMB)
		assert.Greater(t, w.HeapLiveMB, 0.0)
		// Each op it counts has stored its started and completed events
		// before its answer, and so have the warm-up's.
		assert.GreaterOrEqual(t, w.OpsSubjects, uint64(2*(50+w.Ops)), "window %d", i)
	}
	assert.LessOrEqual(t, res.Windows[2].OpsSubjects, res.OpsSubjects)
	assert.Greater(t, res.Memory.RSSMB, 0.0)
	assert.GreaterOrEqual(t, res.Memory.PeakRSSMB, res.Windows[2].PeakRSSMB)
	// The warm-up's and the timed ops' started (decision and claim) and
	// completed, and the policy recorded at start.
	assert.Equal(t, uint64(2*(50+300)+1), res.OpsSubjects)
	assert.Equal(t, 50, res.Warmup)
	assert.Greater(t, res.WarmupOpsPerS, 0.0)
	assert.Equal(t, 4.0, res.MsgsPerOp) // request, started (the decision and the claim), the sealed result, completed
	assert.Equal(t, 1200, res.RawMsgs)
	assert.Greater(t, res.RawMsgBytes, 100)
	assert.Greater(t, res.OpsPerS, 0.0)
	assert.Greater(t, res.RawMsgsPerS, 0.0)
	assert.InDelta(t, res.OpsPerS*res.MsgsPerOp/res.RawMsgsPerS, res.Efficiency, 1e-9)
	assert.InDelta(t, res.OpsPerS/(res.RawMsgsPerS/3), res.LimitRatio, 1e-9)
	// The NATS skeleton: as many ops, the pipeline's four messages each.
	assert.Equal(t, 300, res.SkeletonOps)
	assert.Greater(t, res.SkeletonOpsPerS, 0.0)
	assert.Greater(t, res.SkeletonCPUPerOpUS, 0.0)
	assert.Equal(t, 4.0, res.SkeletonMsgsPerOp)
	assert.InDelta(t, 1-res.SkeletonCPUPerOpUS/res.CPUUSPerOp, res.AirlockCPUShare, 1e-9)
	assert.Equal(t, 60, res.Paced)
	assert.InDelta(t, res.OpsPerS/2, res.PacedRate, 1e-9, "half the peak")
	assert.Greater(t, res.PacedOpsPerS, 0.0)
	assert.LessOrEqual(t, res.PacedOpsPerS, res.PacedRate*1.5, "the paced phase keeps its rate")
	assert.Greater(t, res.PacedP50MS, 0.0)
	assert.Greater(t, res.PacedCPUPerOpUS, 0.0, "the paced phase's CPU per op")
	// An op allocates: the figure is read, not left at zero. (How many
	// collections ran depends on the heap; none is a valid count.)
	assert.Greater(t, res.AllocKBPerOp, 1.0, "heap allocated per op in the pipeline phase")
	assert.Greater(t, res.PacedAllocKBPerOp, 1.0, "heap allocated per op in the paced phase")
	assert.LessOrEqual(t, res.PacedP50MS, res.PacedP99MS)
	assert.Greater(t, res.RawPacedP50MS, 0.0)
	assert.LessOrEqual(t, res.RawPacedP50MS, res.RawPacedP99MS)
	assert.Equal(t, 16, res.LowConcurrency)
	assert.Greater(t, res.LowOpsPerS, 0.0)
	assert.LessOrEqual(t, res.LowP50MS, res.LowP99MS)
	if st := res.LowStages; assert.NotNil(t, st, "the 16-in-flight phase by stage") {
		assert.Equal(t, 60, st.Ops, "every op's records read back")
		for _, d := range []float64{st.ToStartedMS, st.StartedToResultMS, st.ResultToCompletedMS, st.CompletedToAnswerMS} {
			assert.GreaterOrEqual(t, d, 0.0, "%+v: each record after the one before", st)
		}
		assert.LessOrEqual(t, st.ToStartedMS+st.StartedToResultMS+st.ResultToCompletedMS+st.CompletedToAnswerMS, res.LowP99MS*4, "%+v", st)
	}
	assert.LessOrEqual(t, res.P50MS, res.P99MS)
	assert.Equal(t, 20, res.Holds)
	assert.Greater(t, res.HoldP50MS, 0.0)
	assert.LessOrEqual(t, res.HoldP50MS, res.HoldP99MS)
	assert.Greater(t, res.HeldAnswerP50MS, 0.0)
	assert.LessOrEqual(t, res.HeldAnswerP50MS, res.HeldAnswerP99MS)
	assert.Greater(t, res.HoldPhaseS, 0.0)
	assert.Greater(t, res.CPUUSPerHold, 0.0)
	assert.Equal(t, 3000, res.AuditLeaves)
	assert.Greater(t, res.AuditAppendNS, 0.0)
	assert.Greater(t, res.AuditVerifyPerS, 0.0)
	assert.Greater(t, res.OpsPerSNoLog, 0.0)
	assert.InDelta(t, 1-res.OpsPerS/res.OpsPerSNoLog, res.LogCost, 1e-9)
	assert.Greater(t, res.OpsPerSNoResults, 0.0)
	assert.InDelta(t, 1-res.OpsPerS/res.OpsPerSNoResults, res.ResultsCost, 1e-9)
	assert.Equal(t, 40, res.Fetches)
	assert.Greater(t, res.FetchP50MS, 0.0)
	assert.LessOrEqual(t, res.FetchP50MS, res.FetchP99MS)
	assert.Equal(t, 20, res.Execs)
	assert.Greater(t, res.ExecOpsPerS, 0.0)
	assert.Greater(t, res.ForkExecPerS, 0.0)
	assert.InDelta(t, res.ForkExecPerS/res.ExecOpsPerS, res.ExecOverhead, 1e-9)
	// Every target of a default run is checked (a soak of 300 ops is
	// not one of a million: its flatness is not; nor is a walk of 3,000
	// leaves the start-up gate's of a million).
	assert.Equal(t, bench.Targets(res), res.Targets)
	var names []string
	for _, x := range res.Targets {
		names = append(names, x.Name)
	}
	assert.Equal(t, []string{"pipeline", "CPU per op", "limit_ratio", "paced at half the peak, p99", "16 in flight, p50",
		"grant to completed, p99", "exec overhead", "audit verify"}, names)
}

// Each target is met on its side of the bound and not on the other.
func TestTargetsCompareEachFigureWithItsBound(t *testing.T) {
	met := func(res bench.Result) map[string]bool {
		m := map[string]bool{}
		for _, x := range bench.Targets(res) {
			m[x.Name] = x.Met
		}
		return m
	}
	good := bench.Result{OpsPerS: 12000, CPUUSPerOp: 150, LimitRatio: 0.25, Paced: 1, PacedP99MS: 5, LowConcurrency: 16, LowP50MS: 2,
		Holds: 1, HoldP99MS: 10, Execs: 1, ExecOverhead: 1.5, AuditLeaves: bench.Gate, AuditVerifyPerS: 1e6}
	for name, ok := range met(good) {
		assert.True(t, ok, name)
	}
	bad := bench.Result{OpsPerS: 11999, CPUUSPerOp: 151, LimitRatio: 0.24, Paced: 1, PacedP99MS: 5.1, LowConcurrency: 16, LowP50MS: 2.1,
		Holds: 1, HoldP99MS: 10.1, Execs: 1, ExecOverhead: 1.51, AuditLeaves: bench.Gate, AuditVerifyPerS: 666_000}
	m := met(bad)
	assert.Len(t, m, 9)
	for name, ok := range m {
		assert.False(t, ok, name)
	}
	// 1.5 s for a million events is 666,667 leaves/s; a log of fewer
	// leaves is not timed against it.
	assert.True(t, met(bench.Result{AuditLeaves: bench.Gate, AuditVerifyPerS: 667_000})["start-up gate: walk of 1M events"])
	assert.NotContains(t, met(bench.Result{AuditLeaves: bench.Gate - 1, AuditVerifyPerS: 667_000}), "start-up gate: walk of 1M events")
	assert.Equal(t, map[string]bool{"pipeline with --fsync always": true}, met(bench.Result{SyncAlways: true, OpsPerS: 1000, CPUUSPerOp: 999}))
	// A soak of a million ops: flat within 10%, peak RSS under 512 MB
	// and within 10% from 100k on.
	w := func(ops int, opsPerS, cpu, peak float64) bench.Window {
		return bench.Window{Ops: ops, OpsPerS: opsPerS, CPUUSPerOp: cpu, Memory: bench.Memory{PeakRSSMB: peak}}
	}
	soak := met(bench.Result{Windows: []bench.Window{w(50_000, 4000, 400, 300), w(100_000, 4000, 400, 400), w(1_000_000, 3700, 430, 430)}})
	assert.Equal(t, map[string]bool{"pipeline": false, "CPU per op": false, "limit_ratio": false,
		"soak: last window's ops/s / first": true, "soak: last window's CPU/op / first": true,
		"soak: peak RSS": true, "soak: peak RSS at 1M / at 100k": true}, soak)
	soak = met(bench.Result{Windows: []bench.Window{w(50_000, 4000, 400, 300), w(100_000, 4000, 400, 400), w(1_000_000, 3500, 450, 600)}})
	assert.False(t, soak["soak: last window's ops/s / first"])
	assert.False(t, soak["soak: last window's CPU/op / first"])
	assert.False(t, soak["soak: peak RSS"])
	assert.False(t, soak["soak: peak RSS at 1M / at 100k"])
}

type progressCall struct {
	phase       string
	done, total int64
}

// assertProgress checks that each phase of want was reported in order,
// starting at 0, never going back, and ending at want's count.
func assertProgress(t *testing.T, calls, want []progressCall) {
	t.Helper()
	var got []progressCall // the last call of each phase
	for i, c := range calls {
		if i == 0 || calls[i-1].phase != c.phase {
			assert.Zero(t, c.done, "%s starts at 0", c.phase)
			got = append(got, c)
			continue
		}
		assert.GreaterOrEqual(t, c.done, calls[i-1].done, "%s goes forward", c.phase)
		assert.Equal(t, calls[i-1].total, c.total, "%s keeps its total", c.phase)
		got[len(got)-1] = c
	}
	assert.Equal(t, want, got)
}

func TestGOGCReadsTheTargetInForce(t *testing.T) {
	before := debug.SetGCPercent(150)
	defer debug.SetGCPercent(before)
	assert.Equal(t, 150, bench.GOGC())
	debug.SetGCPercent(0)
	assert.Equal(t, 0, bench.GOGC())
	debug.SetGCPercent(-1)
	assert.Equal(t, -1, bench.GOGC())
}
