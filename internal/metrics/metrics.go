package metrics

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// DefaultMaxLag is how many messages the projector may be behind the ops
// stream and still be ready.
const DefaultMaxLag = 1000

// DefaultTimeout bounds the JetStream requests of one scrape or readiness
// check.
const DefaultTimeout = 2 * time.Second

// Config configures Metrics.
type Config struct {
	// Store, Projector and JetStream are what the metrics read. Required.
	Store     *store.Store
	Projector Projection
	JetStream jetstream.JetStream
	// Transitions are the projector's counts (its Observer). Required.
	Transitions *Transitions
	// AuditStatus says whether the audit log verified at start, and if
	// not, why. Required.
	AuditStatus func() (ok bool, detail string)
	// Running returns nil while every part of the process runs, else
	// what stopped. Nil for always.
	Running func() error
	// Live is the live feed's state; nil for none.
	Live LiveFeed
	// Results is the eraser's counts; nil for none.
	Results ResultStats
	// Archive is the archive's counts (ADR 0026); nil for none.
	Archive ArchiveStats
	// MaxLag is the projector lag, in messages of the ops stream, beyond
	// which the process is not ready; zero for DefaultMaxLag.
	MaxLag uint64
	// Timeout bounds each scrape's JetStream requests; zero for
	// DefaultTimeout.
	Timeout time.Duration
	// Clock tells the time; default time.Now.
	Clock func() time.Time
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// EnsureDefaults fills in the defaults of what is unset.
func (c *Config) EnsureDefaults() {
	if c.MaxLag == 0 {
		c.MaxLag = DefaultMaxLag
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks the config, as EnsureDefaults left it; it changes
// nothing.
func (c *Config) Validate() error {
	if c.Store == nil || c.Projector == nil || c.JetStream == nil || c.Transitions == nil || c.AuditStatus == nil {
		return errors.New("metrics: Store, Projector, JetStream, Transitions and AuditStatus are required")
	}
	return nil
}

// Metrics is one process's registry: the transition counts, the stored
// state read at each scrape, JetStream advisories, and the Go runtime's
// and the process's own metrics. It is safe for concurrent use.
type Metrics struct {
	cfg Config
	reg *prometheus.Registry
	adv *advisories

	// mu guards closed: scrapes and readiness checks read the store under
	// its read lock, and Close waits for them before the store closes.
	mu     sync.RWMutex
	closed bool

	// ahead is the first time the projection was seen ahead of its
	// stream: the process stays not ready until it restarts (see
	// Ready).
	ahead atomic.Pointer[string]

	anomalies prometheus.CounterFunc
}

// Projection is what the metrics read of the projector
// (consumers/projector.Projector): how far it has applied the ops stream,
// what it skipped, and its newest signed checkpoint.
type Projection interface {
	Applied() uint64
	Anomalies() uint64
	Latest() *audit.Checkpoint
	LatestAt() time.Time
}

// ResultStats counts what the eraser erased (projector.Eraser).
type ResultStats interface {
	Expired() uint64
	Evicted() uint64
}

// retainedCollector reports the result bytes each workspace keeps, read
// from the projection at each scrape.
type retainedCollector struct{ m *Metrics }

var retainedDesc = prometheus.NewDesc(ResultsRetained,
	"Result bytes (result_bytes, before sealing) each workspace keeps for its agents; over serve's --result-retain-bytes the oldest are erased.", []string{"workspace"}, nil)

func (c retainedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- retainedDesc }

func (c retainedCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.RLock()
	defer c.m.mu.RUnlock()
	if c.m.closed {
		return
	}
	kept, err := c.m.cfg.Store.Retained()
	if err != nil {
		return
	}
	for ws, n := range kept {
		ch <- prometheus.MustNewConstMetric(retainedDesc, prometheus.GaugeValue, float64(n), ws)
	}
}

// ArchiveStats is what a process with an archive of ended ops (ADR 0026)
// counts: its projector's (ArchiveEnd, Filled), its purger's (Purges,
// Floor) and its settles' (Settles).
type ArchiveStats interface {
	ArchiveEnd() uint64
	Filled() uint64
	Purges() uint64
	Floor() uint64
	Settles() (read, answered uint64)
}

// LiveFeed is the live feed's state (internal/livefeed.Feed).
type LiveFeed interface {
	On() bool
	Subscribers() int64
	Changes() uint64
}

// New returns the registry with every Airlock metric registered.
func New(cfg Config) (*Metrics, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Metrics{cfg: cfg, reg: prometheus.NewRegistry(), adv: newAdvisories(cfg)}
	m.anomalies = prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: Anomalies,
		Help: "Op events the projector skipped because they did not decode or broke the state machine.",
	}, func() float64 { return float64(cfg.Projector.Anomalies()) })
	cs := append([]prometheus.Collector{cfg.Transitions}, m.anomalies, &stateCollector{m: m},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cs = append(cs, m.adv.collectors()...)
	if l := cfg.Live; l != nil {
		cs = append(cs,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: LiveFeedOn,
				Help: "1 while AIRLOCK_OPS republishes on airlock.v1.live.> (the live feed), 0 while it does not.",
			}, func() float64 { return b2f(l.On()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: LiveFeedSubs,
				Help: "Subscriptions to the live feed at the last count (mode auto).",
			}, func() float64 { return float64(l.Subscribers()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: LiveFeedChanges,
				Help: "Times this process turned the live feed on or off.",
			}, func() float64 { return float64(l.Changes()) }))
	}
	if r := cfg.Results; r != nil {
		cs = append(cs, retainedCollector{m: m},
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: ResultsExpired,
				Help: "Kept results this process erased because their retention ended.",
			}, func() float64 { return float64(r.Expired()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: ResultsEvicted,
				Help: "Kept results this process erased before their retention ended, because their workspace kept more than --result-retain-bytes.",
			}, func() float64 { return float64(r.Evicted()) }))
	}
	if a := cfg.Archive; a != nil {
		cs = append(cs, archiveCollectors(a)...)
	}
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Close makes every later scrape and readiness check read nothing of the
// store or the projector, once those in flight have ended: call it before
// closing the store. It is idempotent.
func (m *Metrics) Close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
}

// open takes the read lock and reports whether the sources may be read;
// the caller unlocks with m.mu.RUnlock when it is true.
func (m *Metrics) open() bool {
	m.mu.RLock()
	if m.closed {
		m.mu.RUnlock()
		return false
	}
	return true
}

// Registry is where the metrics are registered; Gather it to read them.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Run follows JetStream's advisories about Airlock's streams until ctx
// ends.
func (m *Metrics) Run(ctx context.Context) error { return m.adv.run(ctx) }

// ProjectorLag returns the ops stream's last sequence, the projector's
// applied sequence, and how far behind the first the second is (0 when
// it is not behind).
func (m *Metrics) ProjectorLag(ctx context.Context) (last, applied, lag uint64, err error) {
	r := m.readOps(ctx)
	return r.state.LastSeq, r.applied, r.lag(), r.err
}

// opsReading is the ops stream's state and the projector's applied
// sequence, read in that order reversed: applied first, so that it is
// never ahead of the stream's last sequence unless the stream lost
// messages the projection holds.
type opsReading struct {
	state   jetstream.StreamState
	applied uint64
	err     error
}

func (r opsReading) lag() uint64 {
	if r.err != nil || r.applied >= r.state.LastSeq {
		return 0
	}
	return r.state.LastSeq - r.applied
}

// readOps takes an opsReading, with one JetStream request.
func (m *Metrics) readOps(ctx context.Context) opsReading {
	r := opsReading{applied: m.cfg.Projector.Applied()}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	s, err := m.cfg.JetStream.Stream(ctx, streams.Ops)
	if err != nil {
		r.err = err
		return r
	}
	r.state = s.CachedInfo().State
	return r
}

// stateCollector reads, at each scrape, what the projection and the
// streams hold now.
type stateCollector struct{ m *Metrics }

var (
	descOps          = prometheus.NewDesc(OpsByState, "Ops in each state, as the projection holds them.", []string{"state"}, nil)
	descHolds        = prometheus.NewDesc(HoldsPending, "Ops held for an approver.", nil, nil)
	descHoldAge      = prometheus.NewDesc(HoldOldestAge, "Age of the oldest pending hold, 0 when there is none.", nil, nil)
	descLag          = prometheus.NewDesc(ProjectorLag, "Messages of the ops stream the projector has not applied yet.", nil, nil)
	descApplied      = prometheus.NewDesc(ProjectorSeq, "Ops stream sequence of the last message the projector applied.", nil, nil)
	descLeaves       = prometheus.NewDesc(AuditLeaves, "Leaves in the audit log.", nil, nil)
	descSigned       = prometheus.NewDesc(AuditSigned, "Leaves the newest audit checkpoint signs.", nil, nil)
	descCheckpointAt = prometheus.NewDesc(AuditCheckAge, "Seconds since the newest audit checkpoint was signed; since the process started when it signed none.", nil, nil)
	descVerified     = prometheus.NewDesc(AuditVerified, "1 when the audit log verified at start, 0 when the process started with --unsafe-audit-override over a failure.", nil, nil)
	descReady        = prometheus.NewDesc(Ready, "1 when /readyz answers ready.", nil, nil)
	descLastSeq      = prometheus.NewDesc(StreamLastSeq, "Last sequence of each of Airlock's streams.", []string{"stream"}, nil)
	descMessages     = prometheus.NewDesc(StreamMessages, "Messages stored in each of Airlock's streams.", []string{"stream"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descOps, descHolds, descHoldAge, descLag, descApplied, descLeaves, descSigned, descCheckpointAt, descVerified, descReady, descLastSeq, descMessages} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	if !m.open() {
		return
	}
	defer m.mu.RUnlock()
	cfg := m.cfg
	now := cfg.Clock()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counts := cfg.Store.Counts()
	for _, st := range events.AllStates {
		gauge(descOps, float64(counts[st]), string(st))
	}
	gauge(descHolds, float64(counts[events.StateHeld]))
	age := 0.0
	if held, _, err := cfg.Store.List(events.StateHeld, "", "", 1); err != nil {
		cfg.Logger.Warn("metrics: oldest hold", "err", err)
	} else if len(held) == 1 {
		age = seconds(now.Sub(held[0].UpdatedAt))
	}
	gauge(descHoldAge, age)
	gauge(descApplied, float64(cfg.Projector.Applied()))
	if size, err := cfg.Store.LogSize(); err == nil {
		gauge(descLeaves, float64(size))
	}
	signed := 0.0
	if cp := cfg.Projector.Latest(); cp != nil {
		signed = float64(cp.Size)
	}
	gauge(descSigned, signed)
	gauge(descCheckpointAt, seconds(now.Sub(cfg.Projector.LatestAt())))
	verified, _ := cfg.AuditStatus()
	gauge(descVerified, b2f(verified))

	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	if s, err := cfg.JetStream.Stream(ctx, streams.Requests); err == nil {
		st := s.CachedInfo().State
		gauge(descLastSeq, float64(st.LastSeq), streams.Requests)
		gauge(descMessages, float64(st.Msgs), streams.Requests)
	}
	ops := m.readOps(ctx)
	if ops.err == nil { // else readiness says JetStream did not answer
		gauge(descLastSeq, float64(ops.state.LastSeq), streams.Ops)
		gauge(descMessages, float64(ops.state.Msgs), streams.Ops)
		gauge(descLag, float64(ops.lag()))
	}
	gauge(descReady, b2f(m.readiness(ops).Ready))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
