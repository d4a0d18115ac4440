package bench

import (
	"runtime/metrics"
	"syscall"
	"time"
)

// What the benchmark reads of its own process: the collector's target,
// heap allocation and collections, CPU time and page faults.

// GOGC is the garbage collector's target in force: GOGC's percent, or -1
// when the collector is off.
func GOGC() int {
	sample := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return -1
	}
	return int(int64(sample[0].Value.Uint64())) // off reads as -1
}

// heapWork is what the process had allocated on the heap, in bytes, and
// the collections it had run.
type heapWork struct {
	allocated uint64
	cycles    int
}

func readHeapWork() heapWork {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	var h heapWork
	if s[0].Value.Kind() == metrics.KindUint64 {
		h.allocated = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		h.cycles = int(s[1].Value.Uint64())
	}
	return h
}

// since is the work done between h0 and h.
func (h heapWork) since(h0 heapWork) heapWork {
	return heapWork{allocated: h.allocated - h0.allocated, cycles: h.cycles - h0.cycles}
}

// kbPer is the allocation per op of n ops, in KB.
func (h heapWork) kbPer(n int) float64 { return float64(h.allocated) / 1024 / float64(max(n, 1)) }

// processCPU is the CPU time the process has used, user and system, and
// the minor page faults it has taken.
func processCPU() (time.Duration, int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Minflt
}
