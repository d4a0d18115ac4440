package main

import (
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/bench"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/progress"
	"github.com/airlock-dev/airlock/consumers/projector"
	"github.com/airlock-dev/airlock/internal/livefeed"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/spf13/cobra"
)

func newBench() *cobra.Command {
	var (
		cfg        bench.Config
		asJSON     bool
		fsync      string
		memprofile string
		liveFeed   string
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the pipeline against raw JetStream publish on the same embedded server",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Ops < 1 || cfg.Concurrency < 1 {
				return usageError("--ops and --concurrency must be positive")
			}
			if cfg.Window < 0 || cfg.Window > cfg.Ops {
				return usageError("--window must be from 0 (none) to --ops")
			}
			if cfg.Rate < 0 || cfg.Rate > 1e6 {
				return usageError("--rate must be from 0 (half the peak) to 1000000 ops/s")
			}
			switch fsync {
			case "always":
				cfg.SyncAlways = true
			case "interval":
			default:
				return usageError("--fsync must be always or interval")
			}
			m, err := livefeed.ParseMode(liveFeed)
			if err != nil {
				return usageError("--live-feed: %v", err)
			}
			cfg.LiveFeed = m
			gogc := tuneGC()
			if !asJSON {
				fmt.Fprintf(os.Stderr, "bench: %d echo ops, %d in flight, GOGC=%d, %d warm-up ops first ...\n", cfg.Ops, cfg.Concurrency, gogc, max(cfg.Warmup, 0))
			}
			if memprofile != "" {
				runtime.MemProfileRate = 64 << 10
				defer func() {
					if f, err := os.Create(memprofile); err == nil {
						_ = pprof.Lookup("allocs").WriteTo(f, 0)
						f.Close()
					}
				}()
			}
			var bars phaseBars
			if progress.Enabled(os.Stderr, asJSON) {
				cfg.Progress = bars.report
			}
			res, err := bench.Run(cmd.Context(), cfg)
			bars.finish()
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				printJSON(w, res)
				return nil
			}
			fmt.Fprintf(w, "raw JetStream async publish: %10.0f msgs/s  (%d msgs of %d B)\n", res.RawMsgsPerS, res.RawMsgs, res.RawMsgBytes)
			fmt.Fprintf(w, "pipeline (echo):             %10.0f ops/s   (%d/%d completed)\n", res.OpsPerS, res.Completed, res.Ops)
			fmt.Fprintf(w, "messages per op:             %10.2f   (%s)\n", res.MsgsPerOp, byStream(res.StreamMsgsPerOp))
			if res.Warmup > 0 {
				fmt.Fprintf(w, "warm-up (cold start):        %10.0f ops/s   (%d ops before the timed ones, not counted)\n", res.WarmupOpsPerS, res.Warmup)
			}
			fmt.Fprintf(w, "efficiency:                  %10.2f   (ops/s x msgs/op / raw msgs/s)\n", res.Efficiency)
			fmt.Fprintf(w, "limit_ratio:                 %10.2f   (ops/s / (raw msgs/s / 3): three durable records per op the least)\n", res.LimitRatio)
			fmt.Fprintf(w, "CPU per op:                  %10.0f µs     (process, all goroutines, %d CPUs; %.1f page faults per op)\n", res.CPUUSPerOp, res.CPUs, res.FaultsPerOp)
			fmt.Fprintf(w, "heap allocated per op:       %10.1f KB     (%d collections in the phase, GOGC=%d)\n", res.AllocKBPerOp, res.GCCycles, res.GOGC)
			if res.SkeletonOps > 0 {
				fmt.Fprintf(w, "NATS skeleton of the pipeline: %8.0f ops/s, CPU per op %.0f µs  (the same messages and deliveries, no Airlock work; Airlock's own share of CPU per op %.0f%%)\n",
					res.SkeletonOpsPerS, res.SkeletonCPUPerOpUS, 100*res.AirlockCPUShare)
			}
			fmt.Fprintf(w, "live feed:                   %10s       (airlock.v1.live.>, --live-feed %s)\n", onOff(res.LiveFeed), cfg.LiveFeed)
			if res.KeepOps {
				fmt.Fprintf(w, "ops stream:                  %10s       (--keep-ops: every op's events stay in AIRLOCK_OPS)\n", "keeps all")
			} else {
				fmt.Fprintf(w, "ops stream:                  %10s       (ended ops leave it for AIRLOCK_ARCHIVE %.0f s after they are folded; --keep-ops to keep them)\n", "archives", res.ArchiveAfterS)
				if res.ArchiveBytesPerMsg > 0 {
					fmt.Fprintf(w, "archive:                     %10.0f B      per ops message in its segments  (%.0f B in AIRLOCK_OPS)\n", res.ArchiveBytesPerMsg, res.OpsBytesPerMsg)
				}
				fmt.Fprintf(w, "settles of first events:     %10d read   the ops floor, %d answered by the projection (--archive-keep %d)\n", res.SettleReads, res.SettlesAnswered, res.ArchiveKeep)
			}
			if res.GateDecidesAll {
				fmt.Fprintf(w, "every op decided:            %10s       (--gate-decides-all: no op started by the gate's process)\n", "on")
			}
			fmt.Fprintf(w, "submit-to-completed latency: p50 %.2f ms, p99 %.2f ms\n", res.P50MS, res.P99MS)
			fmt.Fprintf(w, "memory after the pipeline:   %10.0f MB RSS (peak %.0f MB; Go %.0f MB, live heap %.0f MB); %d subjects in AIRLOCK_OPS\n",
				res.Memory.RSSMB, res.Memory.PeakRSSMB, res.Memory.GoMB, res.Memory.HeapLiveMB, res.OpsSubjects)
			fmt.Fprintf(w, "requests erased after the ops: %8d left when the last op ended, all erased %.1f s later\n", res.RequestsLeft, res.EraseLagS)
			if res.PurgeLagS > 0 {
				fmt.Fprintf(w, "ended ops left AIRLOCK_OPS:  %10.1f s after the last op (the newest %d messages stay; the latency phases start then)\n", res.PurgeLagS, res.ArchiveKeep)
			}
			if len(res.Windows) > 0 {
				printWindows(w, res.Windows)
			}
			if res.Paced > 0 {
				fmt.Fprintf(w, "paced at %.0f ops/s:          p50 %.2f ms, p99 %.2f ms  (%d ops, achieved %.0f ops/s; from each op's scheduled time; CPU per op %.0f µs; %.1f KB allocated per op, %d collections)\n", res.PacedRate, res.PacedP50MS, res.PacedP99MS, res.Paced, res.PacedOpsPerS, res.PacedCPUPerOpUS, res.PacedAllocKBPerOp, res.PacedGCCycles)
				fmt.Fprintf(w, "raw JetStream at that load:  p50 %.2f ms, p99 %.2f ms  (chains of %.0f publishes, each awaiting the one before, at %.0f chains/s)\n", res.RawPacedP50MS, res.RawPacedP99MS, res.MsgsPerOp, res.PacedRate)
				fmt.Fprintf(w, "%d in flight:                 p50 %.2f ms, p99 %.2f ms  (%d ops, %.0f ops/s)\n", res.LowConcurrency, res.LowP50MS, res.LowP99MS, res.Paced, res.LowOpsPerS)
				if st := res.LowStages; st != nil {
					fmt.Fprintf(w, "  by stage (medians):         %.2f ms to started, %.2f to the result kept, %.2f to completed, %.2f to the answer  (%d ops, from the stored records' times)\n",
						st.ToStartedMS, st.StartedToResultMS, st.ResultToCompletedMS, st.CompletedToAnswerMS, st.Ops)
				}
			}
			if res.Holds > 0 {
				fmt.Fprintf(w, "grant-to-completed latency:  p50 %.2f ms, p99 %.2f ms  (%d held ops, granted 16 at a time)\n", res.HoldP50MS, res.HoldP99MS, res.Holds)
				fmt.Fprintf(w, "held answer latency:         p50 %.2f ms, p99 %.2f ms  (submit to APPROVAL_REQUIRED, in the same phase; %.2f s in all, CPU per hold %.0f µs)\n", res.HeldAnswerP50MS, res.HeldAnswerP99MS, res.HoldPhaseS, res.CPUUSPerHold)
				if res.HeldEraseLagS > 0 {
					fmt.Fprintf(w, "held requests erased:        %.2f s after the last grant  (one secure delete of AIRLOCK_HELD's block each; the exec phase waits for it)\n", res.HeldEraseLagS)
				}
			}
			if res.Execs > 0 {
				fmt.Fprintf(w, "exec of /bin/true:           %10.0f ops/s   (pipeline, %d at a time)\n", res.ExecOpsPerS, res.ExecConcurrency)
				fmt.Fprintf(w, "bare fork/exec of /bin/true: %10.0f /s      (overhead x%.2f)\n", res.ForkExecPerS, res.ExecOverhead)
			}
			if res.Fetches > 0 {
				fmt.Fprintf(w, "pipeline keeping no results: %10.0f ops/s   (keeping them costs %.1f%%)\n", res.OpsPerSNoResults, 100*res.ResultsCost)
				fmt.Fprintf(w, "result fetch latency:        p50 %.2f ms, p99 %.2f ms  (%d fetches, one at a time)\n", res.FetchP50MS, res.FetchP99MS, res.Fetches)
			}
			if res.AuditLeaves > 0 {
				fmt.Fprintf(w, "pipeline without audit log:  %10.0f ops/s   (the log costs %.1f%%)\n", res.OpsPerSNoLog, 100*res.LogCost)
				fmt.Fprintf(w, "audit log append:            %10.0f ns/event (%d leaves)\n", res.AuditAppendNS, res.AuditLeaves)
				fmt.Fprintf(w, "audit verify:                %10.0f leaves/s\n", res.AuditVerifyPerS)
			}
			met := 0
			for _, t := range res.Targets {
				if t.Met {
					met++
				}
			}
			fmt.Fprintf(w, "targets (docs/performance.md): %d of %d met\n", met, len(res.Targets))
			for _, t := range res.Targets {
				fmt.Fprintf(w, "  %s\n", t)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Ops, "ops", 20000, "echo ops to run")
	f.IntVar(&cfg.Concurrency, "concurrency", 512, "submits in flight")
	f.IntVar(&cfg.Warmup, "warmup", 2000, "echo ops run first through the same Airlock and not timed (-1: none)")
	f.IntVar(&cfg.Holds, "holds", 200, "held ops to grant in the hold phase (-1: none)")
	f.IntVar(&cfg.Execs, "execs", 500, "exec ops of /bin/true in the exec phase, against as many bare fork/execs (-1: none)")
	f.IntVar(&cfg.Paced, "paced", 0, "ops of each latency phase: paced at --rate, then 16 in flight (default 2000, --ops when fewer; -1: none)")
	f.IntVar(&cfg.Skeleton, "skeleton", 0, "ops through the pipeline's NATS skeleton (its messages, headers, deliveries and acknowledgements, no Airlock work) on a fresh server (default --ops; -1: none)")
	f.IntVar(&cfg.Window, "window", 0, "report the pipeline phase in windows of this many ops (ops/s, CPU per op, p99, memory, AIRLOCK_OPS subjects): a soak; 0 for none")
	f.Float64Var(&cfg.Rate, "rate", 0, "ops/s of the paced phase; 0 for half the pipeline phase's")
	f.IntVar(&cfg.Results, "results", 1000, "results to fetch again one at a time, after running the pipeline again keeping none (-1: none)")
	f.IntVar(&cfg.AuditLeaves, "audit-leaves", 1_000_000, "leaves to append to a bare audit log and verify, after running the pipeline again without the log (-1: none)")
	f.StringVar(&fsync, "fsync", "interval", "always or interval, as for serve")
	f.Uint64Var(&cfg.ArchiveKeep, "archive-keep", streams.DefaultArchiveKeep, "the newest messages of AIRLOCK_OPS its purges always leave, as serve's --archive-keep (0: a read of the ops floor per settle, as before ADR 0030): for a comparison")
	f.BoolVar(&cfg.KeepOps, "keep-ops", false, "keep every op's events in AIRLOCK_OPS, as serve --keep-ops: for a comparison")
	f.DurationVar(&cfg.ArchiveAfter, "archive-after", projector.DefaultArchiveAfter, "how long ended ops stay in AIRLOCK_OPS, as serve's --archive-after")
	f.BoolVar(&cfg.GateDecidesAll, "gate-decides-all", false, "decide every op, for the runner's consumer, as before the gate's process started its own ops (ADR 0025): for a comparison")
	f.StringVar(&liveFeed, "live-feed", "auto", "auto (off: nobody subscribes) or on, as for serve: on measures what republishing every stored message costs")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	f.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write a CPU profile of the timed pipeline phase to this file")
	f.StringVar(&memprofile, "memprofile", "", "write an allocation profile to this file")
	f.StringVar(&cfg.Dir, "keep", "", "run in this directory and keep it afterwards (the pipeline's data dir is DIR/pipeline), for inspection; default a temporary one, removed")
	f.StringVar(&cfg.HeapProfile, "heapprofile", "", "write the live heap at the end of the pipeline phase, while its Airlock runs, to this file")
	return cmd
}

// printWindows prints a soak's windows as a table, and how the last
// window compares with the first.
func printWindows(w io.Writer, ws []bench.Window) {
	fmt.Fprintf(w, "%10s %9s %10s %9s %9s %9s %9s %9s %12s\n", "ops", "ops/s", "CPU µs/op", "p99 ms", "RSS MB", "peak MB", "Go MB", "live MB", "ops subjects")
	for _, x := range ws {
		fmt.Fprintf(w, "%10d %9.0f %10.0f %9.1f %9.0f %9.0f %9.0f %9.0f %12d\n", x.Ops, x.OpsPerS, x.CPUUSPerOp, x.P99MS, x.RSSMB, x.PeakRSSMB, x.GoMB, x.HeapLiveMB, x.OpsSubjects)
	}
	if len(ws) < 2 {
		return
	}
	first, last := ws[0], ws[len(ws)-1]
	fmt.Fprintf(w, "last window against the first: ops/s x%.2f, CPU per op x%.2f, peak RSS x%.2f\n",
		last.OpsPerS/first.OpsPerS, last.CPUUSPerOp/first.CPUUSPerOp, last.PeakRSSMB/first.PeakRSSMB)
}

// byStream lists messages per op by stream, in name order.
func byStream(m map[string]float64) string {
	parts := make([]string, 0, len(m))
	for _, name := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %.2f", name, m[name]))
	}
	return strings.Join(parts, ", ")
}

// onOff says on or off.
func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// phaseBars draws a progress bar on stderr for each phase of a bench run,
// one under the other; a bar ends when its phase has done its total, so
// that its time is the phase's. bench.Config.Progress calls report one at
// a time.
type phaseBars struct {
	phase string
	bar   *progress.Reporter // nil once the phase's bar ended
}

func (b *phaseBars) report(phase string, done, total int64) {
	if phase != b.phase {
		b.bar.Finish()
		b.phase = phase
		b.bar = progress.New(os.Stderr, fmt.Sprintf("%-16s", phase), total)
	}
	b.bar.SetTotal(total)
	b.bar.Set(done)
	if total > 0 && done >= total {
		b.finish()
	}
}

func (b *phaseBars) finish() {
	b.bar.Finish()
	b.bar = nil
}
