package bench

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Window is one stretch of the pipeline phase: the figures of the ops
// that completed in it, and the process's memory at its end. A run with
// Config.Window set reports one per Window ops, so that a long run shows
// whether cost and memory grow with the work. JSON keys are API.
type Window struct {
	// Ops is how many timed ops had completed at the window's end.
	Ops        int     `json:"ops"`
	OpsPerS    float64 `json:"ops_per_s"`
	CPUUSPerOp float64 `json:"cpu_us_per_op"`
	// P99MS is the submit-to-outcome latency of the window's ops.
	P99MS float64 `json:"p99_ms"`
	// OpsSubjects is how many distinct subjects AIRLOCK_OPS held at the
	// window's end: the embedded server keeps an index entry for each
	// (ADR 0026).
	OpsSubjects uint64 `json:"ops_subjects"`
	Memory
}

// Memory is what the process holds. JSON keys are API.
type Memory struct {
	// RSSMB is the resident set now; PeakRSSMB the most it has been
	// (VmHWM), in MiB.
	RSSMB     float64 `json:"rss_mb"`
	PeakRSSMB float64 `json:"peak_rss_mb"`
	// HeapLiveMB is the Go heap the last collection found live; the
	// heap may grow to (1 + GOGC/100) times it before the next.
	HeapLiveMB float64 `json:"heap_live_mb"`
	// GoMB is all the memory the Go runtime has mapped (heap, stacks,
	// its own); the rest of the resident set is memory outside it
	// (Pebble's memtables and block cache, with cgo).
	GoMB float64 `json:"go_mb"`
}

// readMemory reads the process's memory now. Figures it cannot read are 0.
func readMemory() Memory {
	var m Memory
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			line := sc.Bytes()
			switch {
			case bytes.HasPrefix(line, []byte("VmRSS:")):
				m.RSSMB = kbField(line)
			case bytes.HasPrefix(line, []byte("VmHWM:")):
				m.PeakRSSMB = kbField(line)
			}
		}
	}
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/total:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		m.HeapLiveMB = float64(s[0].Value.Uint64()) / (1 << 20)
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		m.GoMB = float64(s[1].Value.Uint64()) / (1 << 20)
	}
	return m
}

// writeHeapProfile writes the live heap, after a collection, to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// cpuProfile starts a CPU profile to cfg.CPUProfile, for the main
// pipeline phase only, and returns what stops it; it does nothing
// without a path.
func cpuProfile(cfg Config) (stop func() error, err error) {
	if cfg.CPUProfile == "" || cfg.noLog || cfg.noResults {
		return func() error { return nil }, nil
	}
	f, err := os.Create(cfg.CPUProfile)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// kbField reads "Name:   1234 kB" as MiB.
func kbField(line []byte) float64 {
	f := bytes.Fields(line)
	if len(f) < 2 {
		return 0
	}
	kb, err := strconv.ParseFloat(string(f[1]), 64)
	if err != nil {
		return 0
	}
	return kb / 1024
}

// windows cuts a timed phase into windows of size ops, in the order ops
// complete: done is called once per completed op, from any goroutine.
type windows struct {
	size     int
	subjects func() uint64 // AIRLOCK_OPS' subjects now
	start    time.Time
	cpu0     time.Duration
	count    atomic.Int64
	lat      []time.Duration // by completion order

	mu    sync.Mutex
	marks []mark
}

// mark is the state of the process when a window ended.
type mark struct {
	ops      int
	at       time.Time
	cpu      time.Duration
	mem      Memory
	subjects uint64
}

// newWindows starts cutting n ops into windows of size (nil for size 0),
// reading AIRLOCK_OPS' subjects with subjects at the end of each.
func newWindows(size, n int, subjects func() uint64) *windows {
	if size <= 0 {
		return nil
	}
	cpu, _ := processCPU()
	return &windows{size: size, subjects: subjects, start: time.Now(), cpu0: cpu, lat: make([]time.Duration, n)}
}

// done counts one completed op, taking d as its latency.
func (w *windows) done(d time.Duration) {
	if w == nil {
		return
	}
	k := int(w.count.Add(1))
	if k > len(w.lat) {
		return
	}
	w.lat[k-1] = d
	if k%w.size != 0 && k != len(w.lat) {
		return
	}
	cpu, _ := processCPU()
	mk := mark{ops: k, at: time.Now(), cpu: cpu, mem: readMemory(), subjects: w.subjects()}
	w.mu.Lock()
	w.marks = append(w.marks, mk)
	w.mu.Unlock()
}

// result is the windows, once every op has completed.
func (w *windows) result() []Window {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	slices.SortFunc(w.marks, func(a, b mark) int { return a.ops - b.ops })
	out := make([]Window, 0, len(w.marks))
	prev := mark{at: w.start, cpu: w.cpu0}
	for _, mk := range w.marks {
		n := mk.ops - prev.ops
		if n <= 0 {
			continue
		}
		lat := slices.Clone(w.lat[prev.ops:mk.ops])
		slices.Sort(lat)
		out = append(out, Window{
			Ops:         mk.ops,
			OpsPerS:     float64(n) / mk.at.Sub(prev.at).Seconds(),
			CPUUSPerOp:  float64((mk.cpu - prev.cpu).Microseconds()) / float64(n),
			P99MS:       ms(lat[len(lat)*99/100]),
			OpsSubjects: mk.subjects,
			Memory:      mk.mem,
		})
		prev = mk
	}
	return out
}
