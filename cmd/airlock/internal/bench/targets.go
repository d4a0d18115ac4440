package bench

import "fmt"

// Target is one of the performance targets the benchmark checks its run
// against (docs/performance.md): the figure it measured, the bound, and
// whether the run met it. A target the run did not measure (its phase
// was off) is absent. JSON keys are API.
type Target struct {
	Name     string  `json:"name"`
	Measured float64 `json:"measured"`
	Unit     string  `json:"unit"`
	// AtLeast: the measured figure must be at least Bound; otherwise at
	// most.
	Bound   float64 `json:"bound"`
	AtLeast bool    `json:"at_least"`
	Met     bool    `json:"met"`
}

// String is the target as a line of the benchmark's report.
func (t Target) String() string {
	op, verdict := "≤", "not met"
	if t.AtLeast {
		op = "≥"
	}
	if t.Met {
		verdict = "met"
	}
	return fmt.Sprintf("%-34s %12s %-9s (%s %s)  %s", t.Name, trim(t.Measured), t.Unit, op, trim(t.Bound), verdict)
}

func trim(v float64) string {
	if v >= 100 || v == float64(int64(v)) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// Gate is the number of events whose log the start-up gate's figure is
// for (a start verifies the whole log): the figure is checked only in a
// run whose log had at least that many leaves.
const Gate = 1_000_000

// Targets checks a run's figures against the targets of the issue
// "Twice as fast". The soak's flatness is checked only when the run had
// windows reaching 1,000,000 ops, and --fsync always's figure only when
// the run fsynced every write: in such a run the other targets, set for
// the default, are not checked.
func Targets(res Result) []Target {
	var ts []Target
	add := func(name string, measured float64, unit string, bound float64, atLeast bool) {
		met := measured > 0 && measured <= bound // 0: not measured
		if atLeast {
			met = measured >= bound
		}
		ts = append(ts, Target{Name: name, Measured: measured, Unit: unit, Bound: bound, AtLeast: atLeast, Met: met})
	}
	if res.SyncAlways {
		add("pipeline with --fsync always", res.OpsPerS, "ops/s", 1000, true)
		return ts
	}
	add("pipeline", res.OpsPerS, "ops/s", 12000, true)
	add("CPU per op", res.CPUUSPerOp, "µs", 150, false)
	add("limit_ratio", res.LimitRatio, "", 0.25, true)
	if res.Paced > 0 {
		add("paced at half the peak, p99", res.PacedP99MS, "ms", 5, false)
		add(fmt.Sprintf("%d in flight, p50", res.LowConcurrency), res.LowP50MS, "ms", 2, false)
	}
	if res.Holds > 0 {
		add("grant to completed, p99", res.HoldP99MS, "ms", 10, false)
	}
	if res.Execs > 0 {
		add("exec overhead", res.ExecOverhead, "x", 1.5, false)
	}
	if res.AuditLeaves > 0 && res.AuditVerifyPerS > 0 {
		add("audit verify", res.AuditVerifyPerS, "leaves/s", 1_000_000, true)
	}
	if res.AuditLeaves >= Gate && res.AuditVerifyPerS > 0 {
		// The walk a start makes, timed on a log of a million leaves
		// opened as `audit verify` opens it; a start runs it beside the
		// server's recovery of its streams (docs/performance.md).
		add("start-up gate: walk of 1M events", Gate/res.AuditVerifyPerS, "s", 1.5, false)
	}
	if n := len(res.Windows); n > 1 && res.Windows[n-1].Ops >= 1_000_000 {
		first, last := res.Windows[0], res.Windows[n-1]
		add("soak: last window's ops/s / first", last.OpsPerS/first.OpsPerS, "x", 0.9, true)
		add("soak: last window's CPU/op / first", last.CPUUSPerOp/first.CPUUSPerOp, "x", 1.1, false)
		peak := 0.0
		var at100k float64
		for _, w := range res.Windows {
			peak = max(peak, w.PeakRSSMB)
			if at100k == 0 && w.Ops >= 100_000 {
				at100k = w.PeakRSSMB
			}
		}
		add("soak: peak RSS", peak, "MB", 512, false)
		if at100k > 0 {
			add("soak: peak RSS at 1M / at 100k", peak/at100k, "x", 1.1, false)
		}
	}
	return ts
}
