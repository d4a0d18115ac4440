package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/consumers/projector"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/livefeed"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/producers"
	"github.com/nats-io/nats.go"
)

// Config configures a benchmark run.
type Config struct {
	// Ops is the number of echo ops; default 20000.
	Ops int
	// Concurrency is the number of submits in flight; default 512.
	Concurrency int
	// Warmup is the number of echo ops run through the same Airlock
	// before the pipeline is timed, and not counted; default 2000, -1 for
	// none. A fresh process spends its first seconds growing its heap and
	// buffers, a page fault per 4 KiB touched for the first time, which
	// on a virtual machine costs microseconds each.
	Warmup int
	// Dir is a scratch directory; default a new temporary one, removed
	// after the run.
	Dir string
	// SyncAlways fsyncs every write, as `serve --fsync always` does.
	SyncAlways bool
	// LiveFeed is the live feed's mode, as serve's --live-feed; empty for
	// serve's default (auto: off, since nobody subscribes).
	LiveFeed livefeed.Mode
	// GateDecidesAll runs every op through a decided event and the
	// runner's consumer, as before ADR 0025, for a comparison.
	GateDecidesAll bool
	// KeepOps makes an ops stream that keeps every op's events, as serve's
	// --keep-ops; by default ended ops leave it for the archive
	// ArchiveAfter (default serve's) after they are folded (ADR 0026).
	KeepOps      bool
	ArchiveAfter time.Duration
	// ArchiveKeep is the ops stream's streams.Config.ArchiveKeep, as
	// serve's --archive-keep.
	ArchiveKeep uint64
	// Holds is the number of held ops granted in the hold phase, after
	// the pipeline phase; default 200, -1 for none.
	Holds int
	// Execs is the number of exec ops of /bin/true in the exec phase,
	// measured against as many bare fork/execs; default 500, -1 for none.
	Execs int
	// AuditLeaves is the number of leaves the audit phase appends to a
	// bare log and then verifies; default 1,000,000, -1 for none. The
	// phase also runs the pipeline again without the log.
	AuditLeaves int
	// Results is the number of results the fetch phase fetches again
	// after the pipeline phase, one at a time, and the phase also runs
	// the pipeline again keeping none; default 1000, -1 for none.
	Results int
	// Paced is the number of ops of each latency phase, run after the
	// pipeline phase in the same Airlock: paced at Rate, then 16 at a
	// time; default 2000 (Ops when fewer), -1 for none. Rate is the paced phase's ops/s;
	// 0 for half the pipeline phase's.
	Paced int
	Rate  float64
	// Skeleton is the number of ops of the NATS skeleton phase (the
	// pipeline's messages without Airlock's work, on a fresh server);
	// default Ops, -1 for none.
	Skeleton int
	// Window, when positive, cuts the timed pipeline phase into windows
	// of this many ops and reports each (Result.Windows): a soak that
	// shows whether ops/s, CPU per op and memory stay flat with the work.
	Window int
	// HeapProfile, if set, is where the live heap is written at the end
	// of the timed pipeline phase, while its Airlock still runs: what the
	// process keeps, not what it allocated on the way.
	HeapProfile string
	// CPUProfile, if set, is where a CPU profile of the timed pipeline
	// phase alone is written.
	CPUProfile string
	// Progress, when set, is told how far each phase (the Phase
	// constants, in the order they run) has got: with 0 done when it
	// starts, about every 100ms while it runs and once when it ends (done
	// is total unless it failed). The calls come from a goroutine of the
	// run's own, one at a time; the phases' own goroutines only add to an
	// atomic counter, so reporting does not slow them.
	Progress func(phase string, done, total int64)

	noLog     bool // the pipeline keeps no audit log
	noResults bool // the pipeline keeps no results
}

// Result is what a run measured. JSON keys are API.
type Result struct {
	Ops         int `json:"ops"`
	Concurrency int `json:"concurrency"`
	Warmup      int `json:"warmup"`
	// WarmupOpsPerS is the warm-up's own rate (a cold start).
	WarmupOpsPerS float64 `json:"warmup_ops_per_s"`
	RawMsgs       int     `json:"raw_msgs"`
	RawMsgBytes   int     `json:"raw_msg_bytes"`
	RawMsgsPerS   float64 `json:"raw_msgs_per_s"`
	OpsPerS       float64 `json:"ops_per_s"`
	MsgsPerOp     float64 `json:"msgs_per_op"`
	// StreamMsgsPerOp is MsgsPerOp by stream: each stream stores its
	// messages one at a time, and with --fsync always syncs each.
	StreamMsgsPerOp map[string]float64 `json:"stream_msgs_per_op,omitempty"`
	// Efficiency is ops/s x msgs per op / raw msgs/s: the share of raw
	// JetStream publish throughput the pipeline turns into ops.
	Efficiency float64 `json:"efficiency"`
	// LimitRatio is ops/s / (raw msgs/s / 3): three durable records per
	// op (the accepted request, the claim before the effect, the
	// outcome) being the least the design needs.
	LimitRatio float64 `json:"limit_ratio"`
	// SkeletonOps ops ran through the pipeline's NATS skeleton (the same
	// streams, messages, headers, deliveries and acknowledgements, no
	// Airlock work; see skeleton) on a fresh server, at SkeletonOpsPerS
	// and SkeletonCPUPerOpUS; AirlockCPUShare is 1 - SkeletonCPUPerOpUS /
	// CPUUSPerOp: the part of the pipeline's CPU per op that is not the
	// messages' own.
	SkeletonOps        int     `json:"skeleton_ops"`
	SkeletonOpsPerS    float64 `json:"skeleton_ops_per_s"`
	SkeletonCPUPerOpUS float64 `json:"skeleton_cpu_per_op_us"`
	SkeletonMsgsPerOp  float64 `json:"skeleton_msgs_per_op"`
	AirlockCPUShare    float64 `json:"airlock_cpu_share"`
	// Paced ops were submitted at PacedRate ops/s (achieving
	// PacedOpsPerS), each measured from its scheduled time to its
	// outcome; then as many LowConcurrency at a time.
	Paced        int     `json:"paced"`
	PacedRate    float64 `json:"paced_rate"`
	PacedOpsPerS float64 `json:"paced_ops_per_s"`
	PacedP50MS   float64 `json:"paced_p50_ms"`
	PacedP99MS   float64 `json:"paced_p99_ms"`
	// PacedCPUPerOpUS is the process's CPU per op over the paced phase:
	// with little in flight each stage handles an op or two at a time,
	// and the cost per op is not the pipeline phase's.
	PacedCPUPerOpUS float64 `json:"paced_cpu_per_op_us"`
	// PacedAllocKBPerOp and PacedGCCycles are the paced phase's heap
	// allocation per op and its collections: a phase with none has no
	// stall of the collector's in its tail.
	PacedAllocKBPerOp float64 `json:"paced_alloc_kb_per_op"`
	PacedGCCycles     int     `json:"paced_gc_cycles"`
	// RawPacedP50MS and RawPacedP99MS are raw JetStream's at the paced
	// phase's load, on the raw phase's server: chains of MsgsPerOp
	// publishes, each waiting for the one before it (as an op's records
	// do), started at PacedRate chains/s and timed from each chain's
	// scheduled time to its last acknowledgement. The least an op's
	// latency could be at that load.
	RawPacedP50MS  float64 `json:"raw_paced_p50_ms"`
	RawPacedP99MS  float64 `json:"raw_paced_p99_ms"`
	LowConcurrency int     `json:"low_concurrency"`
	LowOpsPerS     float64 `json:"low_ops_per_s"`
	LowP50MS       float64 `json:"low_p50_ms"`
	LowP99MS       float64 `json:"low_p99_ms"`
	// LowStages is where the 16-in-flight phase's ops spent their time,
	// read back from the times the server stored their records at.
	LowStages *Stages `json:"low_stages,omitempty"`
	P50MS     float64 `json:"p50_ms"`
	P99MS     float64 `json:"p99_ms"`
	// CPUUSPerOp is the process's CPU time (user and system, every
	// goroutine: server, Airlock and the benchmark's clients) during the
	// pipeline phase, per op, in microseconds. On a busy machine it
	// varies less than ops/s.
	CPUUSPerOp float64 `json:"cpu_us_per_op"`
	// CPUs is GOMAXPROCS during the run.
	CPUs int `json:"cpus"`
	// GOGC is the garbage collector's target during the run.
	GOGC int `json:"gogc"`
	// FaultsPerOp is the process's minor page faults during the pipeline
	// phase, per op: first touches of memory the process had not used
	// before, or had given back. Each costs microseconds on a virtual
	// machine, so they show up in CPU per op.
	FaultsPerOp float64 `json:"faults_per_op"`
	// AllocKBPerOp is what the process allocated on the heap during the
	// pipeline phase, per op, in KB, and GCCycles the collections it
	// ran: each collection's mark slows every goroutine for tens of
	// milliseconds under load (docs/performance.md, "The paced tail is
	// the collector").
	AllocKBPerOp float64 `json:"alloc_kb_per_op"`
	GCCycles     int     `json:"gc_cycles"`
	Completed    int     `json:"completed"`
	SyncAlways   bool    `json:"sync_always"`
	// LiveFeed says whether AIRLOCK_OPS republished on airlock.v1.live.>
	// at the end of the timed pipeline phase (nobody subscribes in a run,
	// so it is on with --live-feed on only).
	LiveFeed bool `json:"live_feed"`
	// GateDecidesAll: every op was decided (--gate-decides-all).
	GateDecidesAll bool `json:"gate_decides_all,omitempty"`
	// KeepOps: the ops stream kept every op's events (--keep-ops);
	// otherwise ended ops left it ArchiveAfterS after they were folded.
	KeepOps       bool    `json:"keep_ops,omitempty"`
	ArchiveAfterS float64 `json:"archive_after_s,omitempty"`
	// ArchiveKeep is what purges of the ops stream left (--archive-keep);
	// SettleReads and SettlesAnswered count the settles of the whole run
	// that read the ops floor and those the projection answered alone.
	ArchiveKeep     uint64 `json:"archive_keep"`
	SettleReads     uint64 `json:"settle_reads"`
	SettlesAnswered uint64 `json:"settles_answered"`
	// Holds ops were held, then granted; HoldP50MS and HoldP99MS are the
	// grant-to-completed latency.
	Holds     int     `json:"holds"`
	HoldP50MS float64 `json:"hold_p50_ms"`
	HoldP99MS float64 `json:"hold_p99_ms"`
	// HeldAnswerP50MS and HeldAnswerP99MS are the latency of the held
	// submits themselves, from the publish to APPROVAL_REQUIRED (the
	// agent waits on it), and HoldPhaseS the hold phase's duration.
	HeldAnswerP50MS float64 `json:"held_answer_p50_ms"`
	HeldAnswerP99MS float64 `json:"held_answer_p99_ms"`
	HoldPhaseS      float64 `json:"hold_phase_s"`
	// CPUUSPerHold is the process's CPU in the hold phase per hold: the
	// held submit, the grant, the submit again and what Airlock does for
	// them (16 at a time, grant latency is mostly waiting behind it).
	CPUUSPerHold float64 `json:"cpu_us_per_hold"`
	// HeldEraseLagS is how long after the hold phase AIRLOCK_HELD still
	// held requests of granted ops, erased one secure delete at a time
	// (measured before the exec phase, which starts after).
	HeldEraseLagS float64 `json:"held_erase_lag_s,omitempty"`
	// Execs exec ops of /bin/true ran through the pipeline at ExecOpsPerS;
	// the same number of bare fork/execs ran at ForkExecPerS, both
	// ExecConcurrency at a time. ExecOverhead is their ratio.
	Execs           int     `json:"execs"`
	ExecConcurrency int     `json:"exec_concurrency"`
	ExecOpsPerS     float64 `json:"exec_ops_per_s"`
	ForkExecPerS    float64 `json:"fork_exec_per_s"`
	ExecOverhead    float64 `json:"exec_overhead"`
	// OpsPerSNoLog is the pipeline's ops/s run again, the same way,
	// without the audit log; LogCost is 1 - OpsPerS/OpsPerSNoLog.
	OpsPerSNoLog float64 `json:"ops_per_s_no_log"`
	LogCost      float64 `json:"log_cost"`
	// AuditLeaves leaves were appended to a bare log at AuditAppendNS
	// each (leaf encoding, hashes, Pebble batch, a checkpoint per 1024),
	// then verified at AuditVerifyPerS leaves/s.
	// OpsPerSNoResults is the pipeline's ops/s run again keeping no
	// results; ResultsCost is 1 - OpsPerS/OpsPerSNoResults. Fetches
	// results were fetched again, one at a time (ops result), at
	// FetchP50MS and FetchP99MS.
	OpsPerSNoResults float64 `json:"ops_per_s_no_results"`
	ResultsCost      float64 `json:"results_cost"`
	Fetches          int     `json:"fetches"`
	FetchP50MS       float64 `json:"fetch_p50_ms"`
	FetchP99MS       float64 `json:"fetch_p99_ms"`
	// Memory is the process's memory at the end of the timed pipeline
	// phase; Windows the phase's windows when Config.Window is set.
	Memory  Memory   `json:"memory"`
	Windows []Window `json:"windows,omitempty"`
	// OpsSubjects is how many distinct subjects AIRLOCK_OPS holds at the
	// end of the pipeline phase: the server keeps an index entry for
	// each in memory.
	OpsSubjects uint64 `json:"ops_subjects"`
	// OpsBytesPerMsg is what AIRLOCK_OPS stores per message at the end of
	// the pipeline phase, and ArchiveBytesPerMsg what AIRLOCK_ARCHIVE
	// stores per message of it in its segments (0 with KeepOps).
	OpsBytesPerMsg     float64 `json:"ops_bytes_per_msg"`
	ArchiveBytesPerMsg float64 `json:"archive_bytes_per_msg"`
	// RequestsLeft is how many requests (argument plaintext) were still
	// stored when the pipeline phase's last op ended, and EraseLagS how
	// long the scrubber then took to erase them all.
	RequestsLeft uint64  `json:"requests_left"`
	EraseLagS    float64 `json:"erase_lag_s"`
	// PurgeLagS is how long after the pipeline phase's last op its ended
	// ops' events had left AIRLOCK_OPS (all but the newest ArchiveKeep
	// messages): the latency phases start then (0 with KeepOps).
	PurgeLagS       float64 `json:"purge_lag_s,omitempty"`
	AuditLeaves     int     `json:"audit_leaves"`
	AuditAppendNS   float64 `json:"audit_append_ns"`
	AuditVerifyPerS float64 `json:"audit_verify_per_s"`
	// Targets are the run's figures against the performance targets.
	Targets []Target `json:"targets"`
}

// Run measures the pipeline, then raw async publish of as many messages as
// the pipeline stored, of the same mean size, on a fresh server with the
// same settings.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Ops <= 0 {
		cfg.Ops = 20000
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 512
	}
	switch {
	case cfg.Warmup == 0:
		cfg.Warmup = 2000
	case cfg.Warmup < 0:
		cfg.Warmup = 0
	}
	if cfg.Holds == 0 {
		cfg.Holds = 200
	}
	if cfg.Execs == 0 {
		cfg.Execs = 500
	}
	if cfg.AuditLeaves == 0 {
		cfg.AuditLeaves = 1_000_000
	}
	if cfg.Results == 0 {
		cfg.Results = 1000
	}
	if cfg.Paced == 0 {
		cfg.Paced = min(2000, cfg.Ops)
	}
	if cfg.Skeleton == 0 {
		cfg.Skeleton = cfg.Ops
	}
	if cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "airlock-bench-")
		if err != nil {
			return Result{}, err
		}
		defer os.RemoveAll(dir)
		cfg.Dir = dir
	}
	res := Result{Ops: cfg.Ops, Concurrency: cfg.Concurrency, SyncAlways: cfg.SyncAlways, Warmup: cfg.Warmup}
	msgs, bytes, err := pipeline(ctx, cfg, &res)
	if err != nil {
		return res, fmt.Errorf("pipeline: %w", err)
	}
	res.MsgsPerOp = float64(msgs) / float64(cfg.Ops)
	res.RawMsgs = int(msgs)
	res.RawMsgBytes = int(bytes / max(msgs, 1))
	if res.RawMsgsPerS, err = raw(ctx, cfg, &res); err != nil {
		return res, fmt.Errorf("raw: %w", err)
	}
	res.Efficiency = res.OpsPerS * res.MsgsPerOp / res.RawMsgsPerS
	res.LimitRatio = res.OpsPerS / (res.RawMsgsPerS / 3)
	if cfg.Skeleton > 0 {
		res.SkeletonOps = cfg.Skeleton
		if res.SkeletonOpsPerS, res.SkeletonCPUPerOpUS, res.SkeletonMsgsPerOp, err = skeleton(ctx, cfg, &res, cfg.Skeleton); err != nil {
			return res, fmt.Errorf("NATS skeleton: %w", err)
		}
		res.AirlockCPUShare = 1 - res.SkeletonCPUPerOpUS/res.CPUUSPerOp
	}
	if cfg.Results > 0 {
		ops, err := again(ctx, cfg, "noresults", func(c *Config) { c.noResults = true })
		if err != nil {
			return res, fmt.Errorf("pipeline keeping no results: %w", err)
		}
		res.OpsPerSNoResults, res.ResultsCost = ops, 1-res.OpsPerS/ops
	}
	if cfg.AuditLeaves > 0 {
		ops, err := again(ctx, cfg, "nolog", func(c *Config) { c.noLog = true })
		if err != nil {
			return res, fmt.Errorf("pipeline without the log: %w", err)
		}
		res.OpsPerSNoLog, res.LogCost = ops, 1-res.OpsPerS/ops
		if err := auditLog(cfg, &res); err != nil {
			return res, fmt.Errorf("audit: %w", err)
		}
	}
	res.Targets = Targets(res)
	return res, nil
}

// again runs the pipeline phase alone once more, in a fresh data dir
// under cfg.Dir, as change makes it, and returns its ops/s.
func again(ctx context.Context, cfg Config, dir string, change func(*Config)) (float64, error) {
	var r Result
	cfg.Holds, cfg.Execs, cfg.Results, cfg.Paced, cfg.Skeleton = -1, -1, -1, -1, -1
	cfg.Dir = filepath.Join(cfg.Dir, dir)
	change(&cfg)
	if _, _, err := pipeline(ctx, cfg, &r); err != nil {
		return 0, err
	}
	return r.OpsPerS, nil
}

// pipeline runs cfg.Ops echo ops through a whole Airlock and returns how
// many messages, and bytes, the streams took.
func pipeline(ctx context.Context, cfg Config, res *Result) (msgs, bytes uint64, err error) {
	execRoot := filepath.Join(cfg.Dir, "exec-root")
	if err := os.MkdirAll(execRoot, 0o700); err != nil {
		return 0, 0, err
	}
	a, err := app.Start(ctx, app.Config{
		DataDir: filepath.Join(cfg.Dir, "pipeline"), SyncAlways: cfg.SyncAlways, Logger: quiet(), NoAuditLog: cfg.noLog,
		ResultTTL: resultTTL(cfg.noResults),
		LiveFeed:  cfg.LiveFeed, GateDecidesAll: cfg.GateDecidesAll,
		Streams: streams.Config{PurgeOps: !cfg.KeepOps, ArchiveKeep: cfg.ArchiveKeep}, ArchiveAfter: cfg.archiveAfter(),
		Policy: policy.Spec{
			// echo writes here, so that it is held in the hold phase's
			// confirm workspace; it runs at once in the auto one.
			Tools: map[string]string{"echo": string(policy.ClassWrite)},
			Workspaces: map[string]policy.WorkspaceSpec{
				holdWorkspace: {Mode: string(policy.ModeConfirm)},
				execWorkspace: {Mode: string(policy.ModeAuto), Root: execRoot},
			},
		},
	})
	if err != nil {
		return 0, 0, err
	}
	defer a.Shutdown(context.WithoutCancel(ctx))
	baseMsgs, baseKept, baseBytes, err := stored(ctx, a.JetStream)
	if err != nil {
		return 0, 0, err
	}
	baseSeqs, err := lastSeqs(ctx, a.JetStream)
	if err != nil {
		return 0, 0, err
	}
	nc, err := nats.Connect("", nats.InProcessServer(a.Server))
	if err != nil {
		return 0, 0, err
	}
	defer nc.Close()
	c, err := producers.New(nc, producers.WithWait(2*time.Minute))
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()

	if cfg.Warmup > 0 {
		wstart := time.Now()
		if _, _, err := submitAll(ctx, c, cfg.Concurrency, cfg.Warmup, "warmup", nil, nil, nil, nil); err != nil {
			return 0, 0, fmt.Errorf("warm-up: %w", err)
		}
		res.WarmupOpsPerS = float64(cfg.Warmup) / time.Since(wstart).Seconds()
		if baseMsgs, baseKept, baseBytes, err = stored(ctx, a.JetStream); err != nil {
			return 0, 0, err
		}
		if baseSeqs, err = lastSeqs(ctx, a.JetStream); err != nil {
			return 0, 0, err
		}
	}
	lat := make([]time.Duration, cfg.Ops)
	phase := PhasePipeline
	switch {
	case cfg.noLog:
		phase = PhasePipelineNoLog
	case cfg.noResults:
		phase = PhasePipelineNoResults
	}
	m := cfg.track(phase, cfg.Ops)
	defer m.end()
	win := newWindows(cfg.Window, cfg.Ops, func() uint64 {
		n, _ := subjects(ctx, a.JetStream, streams.Ops)
		return n
	})
	stopProfile, err := cpuProfile(cfg)
	if err != nil {
		return 0, 0, err
	}
	cpu0, faults0 := processCPU()
	heap0 := readHeapWork()
	completed, elapsed, err := submitAll(ctx, c, cfg.Concurrency, cfg.Ops, "bench", lat, nil, m, win)
	cpu, faults := processCPU()
	heap := readHeapWork().since(heap0)
	if perr := stopProfile(); perr != nil {
		return 0, 0, perr
	}
	res.Memory = readMemory()
	res.Windows = win.result()
	if cfg.HeapProfile != "" && !cfg.noLog && !cfg.noResults {
		if err := writeHeapProfile(cfg.HeapProfile); err != nil {
			return 0, 0, err
		}
	}
	cpu, faults = cpu-cpu0, faults-faults0
	if err != nil {
		return 0, 0, err
	}
	res.CPUUSPerOp = float64(cpu.Microseconds()) / float64(cfg.Ops)
	res.CPUs = runtime.GOMAXPROCS(0)
	res.LiveFeed = a.Live.On()
	res.GateDecidesAll = cfg.GateDecidesAll
	res.KeepOps = cfg.KeepOps
	if !cfg.KeepOps {
		res.ArchiveAfterS = cfg.archiveAfter().Seconds()
		res.ArchiveKeep = cfg.ArchiveKeep
	}
	res.GOGC = GOGC()
	res.FaultsPerOp = float64(faults) / float64(cfg.Ops)
	res.AllocKBPerOp, res.GCCycles = heap.kbPer(cfg.Ops), heap.cycles
	res.Completed = completed
	res.OpsPerS = float64(cfg.Ops) / elapsed.Seconds()
	slices.Sort(lat)
	res.P50MS = ms(lat[len(lat)/2])
	res.P99MS = ms(lat[len(lat)*99/100])
	var kept uint64
	if msgs, kept, bytes, err = stored(ctx, a.JetStream); err != nil {
		return 0, 0, err
	}
	seqs, err := lastSeqs(ctx, a.JetStream)
	if err != nil {
		return 0, 0, err
	}
	res.StreamMsgsPerOp = make(map[string]float64, len(seqs))
	for name, seq := range seqs {
		res.StreamMsgsPerOp[name] = float64(seq-baseSeqs[name]) / float64(cfg.Ops)
	}
	if res.OpsSubjects, err = subjects(ctx, a.JetStream, streams.Ops); err != nil {
		return 0, 0, err
	}
	if res.OpsBytesPerMsg, res.ArchiveBytesPerMsg, err = archiveBytes(ctx, a.JetStream); err != nil {
		return 0, 0, err
	}
	if !cfg.noLog && !cfg.noResults {
		// Args are plaintext at rest until the scrubber erases them: how
		// many it had left when the last op completed, and how long it
		// took to catch up. The phases after this one start once it has.
		if res.RequestsLeft, err = requestsStored(ctx, a.JetStream); err != nil {
			return 0, 0, err
		}
		if res.EraseLagS, err = erased(ctx, a.JetStream); err != nil {
			return 0, 0, err
		}
	}
	if cfg.Paced > 0 {
		// Normal load starts from a settled Airlock: the projection has
		// folded the pipeline phase's backlog, and its ended ops have
		// left the ops stream (the first purge after a burst walks a
		// subject index as large as the burst, under the stream's lock:
		// docs/performance.md, "What a purge stalls").
		if err := settle(ctx, a); err != nil {
			return 0, 0, err
		}
		if !cfg.KeepOps {
			if res.PurgeLagS, err = purged(ctx, cfg, a, seqs[streams.Ops]); err != nil {
				return 0, 0, err
			}
		}
		if err := latencyPhases(ctx, cfg, a.JetStream, c, res); err != nil {
			return 0, 0, fmt.Errorf("latency: %w", err)
		}
	}
	if cfg.Results > 0 {
		// The fetches read the projection: let it fold every outcome.
		if err := settle(ctx, a); err != nil {
			return 0, 0, err
		}
		if err := fetches(ctx, cfg, c, res); err != nil {
			return 0, 0, fmt.Errorf("fetches: %w", err)
		}
	}
	if cfg.Holds > 0 {
		if err := holds(ctx, cfg, a, c, res); err != nil {
			return 0, 0, fmt.Errorf("holds: %w", err)
		}
	}
	if cfg.Execs > 0 {
		// Like the phases of normal load, exec starts from a settled
		// Airlock: the projection has folded the phases before, and
		// their requests are erased; the bare fork/execs it is measured
		// against run with nothing of them left.
		if err := settle(ctx, a); err != nil {
			return 0, 0, err
		}
		if !cfg.noLog && !cfg.noResults {
			if _, err := erased(ctx, a.JetStream); err != nil {
				return 0, 0, err
			}
			// A granted op's held request is erased with a secure
			// delete, which rewrites AIRLOCK_HELD's block and syncs it:
			// after a burst of grants that goes on for a while, and
			// slows whatever runs meanwhile.
			if res.HeldEraseLagS, err = emptied(ctx, a.JetStream, streams.Held); err != nil {
				return 0, 0, err
			}
		}
		if err := execs(ctx, cfg, c, execRoot, res); err != nil {
			return 0, 0, fmt.Errorf("execs: %w", err)
		}
	}
	if !cfg.noLog && !cfg.noResults {
		res.SettleReads, res.SettlesAnswered = a.Settles()
	}
	// Requests are erased once their ops end: their bytes are counted at
	// the mean size of the messages kept.
	msgs -= baseMsgs
	bytes = (bytes - baseBytes) * msgs / max(kept-baseKept, 1)
	return msgs, bytes, nil
}

// submitAll submits n echo ops, concurrency at a time, with idempotency
// keys <prefix>-<i>, and returns how many completed and how long they
// took. lat, if not nil, takes each op's submit-to-outcome latency; m, if
// not nil, counts them (and is ended); w, if not nil, cuts them into
// windows.
func submitAll(ctx context.Context, c *producers.Client, concurrency, n int, prefix string, lat []time.Duration, starts []time.Time, m *meter, w *windows) (int, time.Duration, error) {
	var completed atomic.Int64
	took, err := parallel(ctx, m, concurrency, n, func(i int) error {
		t0 := time.Now()
		if starts != nil {
			starts[i] = t0
		}
		out, err := c.Submit(ctx, benchRequest(prefix, i))
		d := time.Since(t0)
		if lat != nil {
			lat[i] = d
		}
		w.done(d)
		if err == nil && out.State == events.StateCompleted {
			completed.Add(1)
		}
		return err
	})
	return int(completed.Load()), took, err
}

// benchRequest is the pipeline's ith echo request.
func benchRequest(prefix string, i int) events.Request {
	return events.Request{
		Workspace: "bench", Agent: "bench", Tool: "echo",
		Args:           json.RawMessage(fmt.Sprintf(`{"n":%d,"text":"hello from the benchmark"}`, i)),
		IdempotencyKey: fmt.Sprintf("%s-%d", prefix, i),
	}
}

// resultTTL is app.Config.ResultTTL for a pipeline that keeps results or
// none.
func resultTTL(none bool) time.Duration {
	if none {
		return -1
	}
	return 0
}

// fetches fetches cfg.Results of the pipeline's results again, one at a
// time, as an agent that lost its replies would (ops result), and takes
// the latencies.
func fetches(ctx context.Context, cfg Config, c *producers.Client, res *Result) error {
	n := min(cfg.Results, cfg.Ops)
	lat := make([]time.Duration, n)
	m := cfg.track(PhaseFetch, n)
	defer m.end()
	for i := range n {
		req := benchRequest("bench", i*cfg.Ops/n)
		_, op := req.Identity()
		t0 := time.Now()
		out, err := c.Result(ctx, req.Agent, op)
		lat[i] = time.Since(t0)
		if err != nil {
			return err
		}
		if out.Result == nil {
			return fmt.Errorf("op %s: no result", op)
		}
		m.add(1)
	}
	slices.Sort(lat)
	res.Fetches = n
	res.FetchP50MS = ms(lat[n/2])
	res.FetchP99MS = ms(lat[n*99/100])
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// archiveAfter is how long ended ops stay in the ops stream.
func (c Config) archiveAfter() time.Duration {
	if c.ArchiveAfter == 0 {
		return projector.DefaultArchiveAfter
	}
	return c.ArchiveAfter
}
