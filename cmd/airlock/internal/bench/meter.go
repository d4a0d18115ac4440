package bench

import (
	"sync"
	"sync/atomic"
	"time"
)

// progressInterval is how often a phase's count is sampled for
// Config.Progress.
const progressInterval = 100 * time.Millisecond

// The phases Config.Progress names.
const (
	PhasePipeline          = "pipeline"
	PhaseHolds             = "holds"
	PhaseExec              = "exec"
	PhaseForkExec          = "fork/exec"
	PhaseRaw               = "raw publish"
	PhaseRawPaced          = "raw, paced"
	PhaseSkeleton          = "NATS skeleton"
	PhasePipelineNoLog     = "pipeline, no log"
	PhasePipelineNoResults = "no results kept"
	PhaseFetch             = "result fetch"
	PhasePaced             = "paced"
	PhaseLow               = "16 in flight"
	PhaseAuditAppend       = "audit append"
	PhaseAuditVerify       = "audit verify"
)

// meter counts what a phase has done, for Config.Progress. The hot path
// pays an atomic add; a goroutine of the meter's own samples the count.
// A nil meter (no Progress) counts nothing.
type meter struct {
	done atomic.Int64
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// track starts reporting phase, of total items, to cfg.Progress: at once
// with 0 done, then every progressInterval until end. It returns nil when
// cfg.Progress is nil.
func (cfg Config) track(phase string, total int) *meter {
	return cfg.trackAdjusted(phase, total, nil)
}

// trackAdjusted is track reporting adjust(count) as done, when adjust is
// not nil; it runs on the meter's goroutine.
func (cfg Config) trackAdjusted(phase string, total int, adjust func(count int64) int64) *meter {
	if cfg.Progress == nil {
		return nil
	}
	m := &meter{stop: make(chan struct{})}
	done := func() int64 {
		n := m.done.Load()
		if adjust != nil {
			n = max(adjust(n), 0)
		}
		return n
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		cfg.Progress(phase, 0, int64(total))
		for {
			select {
			case <-t.C:
				cfg.Progress(phase, done(), int64(total))
			case <-m.stop:
				cfg.Progress(phase, done(), int64(total))
				return
			}
		}
	}()
	return m
}

// add counts n more items done.
func (m *meter) add(n int64) {
	if m != nil {
		m.done.Add(n)
	}
}

// set sets the items done to n.
func (m *meter) set(n int64) {
	if m != nil {
		m.done.Store(n)
	}
}

// end reports the phase's last count and waits for the meter's goroutine.
// It is idempotent.
func (m *meter) end() {
	if m == nil {
		return
	}
	m.once.Do(func() { close(m.stop) })
	m.wg.Wait()
}
