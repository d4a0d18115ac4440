package livefeed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// Mode says when the feed is on.
type Mode string

// The modes.
const (
	// Auto: on while anyone subscribes to the live feed. Embedded server
	// only.
	Auto Mode = "auto"
	// On: always on.
	On Mode = "on"
)

// ParseMode parses a --live-feed value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Auto, On:
		return m, nil
	}
	return "", fmt.Errorf("live feed mode %q: want auto or on", s)
}

// Defaults.
const (
	// DefaultPoll is how often Auto counts the subscribers.
	DefaultPoll = 250 * time.Millisecond
	// DefaultHold is how long the feed stays on after its last subscriber
	// left: a watcher that reconnects finds it still on.
	DefaultHold = 10 * time.Second
	// Reconcile is how often the feed reads the stream's config again,
	// in case something else changed it.
	Reconcile = 10 * time.Second
)

// Config configures a Feed.
type Config struct {
	// JetStream reaches the ops stream. Required.
	JetStream jetstream.JetStream
	// Mode is Auto or On; empty means Auto with a Server, On without.
	Mode Mode
	// Server is the embedded server whose subscriptions Auto counts;
	// required by Auto.
	Server *server.Server
	// Account is the server account whose subscriptions count: Airlock's
	// own (a client account's subscriptions appear there through their
	// imports). Required by Auto.
	Account string
	// Poll and Hold; zero for DefaultPoll and DefaultHold.
	Poll, Hold time.Duration
	// Clock tells the time; default time.Now.
	Clock func() time.Time
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// EnsureDefaults fills in the defaults of what is unset.
func (c *Config) EnsureDefaults() {
	if c.Mode == "" {
		c.Mode = On
		if c.Server != nil {
			c.Mode = Auto
		}
	}
	if c.Poll <= 0 {
		c.Poll = DefaultPoll
	}
	if c.Hold <= 0 {
		c.Hold = DefaultHold
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
	if c.JetStream == nil {
		return errors.New("livefeed: JetStream is required")
	}
	if _, err := ParseMode(string(c.Mode)); err != nil {
		return fmt.Errorf("livefeed: %w", err)
	}
	if c.Mode == Auto && (c.Server == nil || c.Account == "") {
		return errors.New("livefeed: mode auto needs the embedded server and its account: with an external NATS the feed is always on")
	}
	return nil
}

// Feed turns the live feed on and off. Its methods are safe for concurrent
// use.
type Feed struct {
	cfg Config

	// mu serializes counts and checks, so that two never update the
	// stream at once: a semaphore, so that Sync can give up waiting.
	mu       chan struct{}
	seen     time.Time // when a subscriber was last counted
	reconcil time.Time // when the stream's config was last read
	// failed is the last update's error, logged again only when it
	// changes or failLog after it was.
	failed   string
	failedAt time.Time
	// The account sublist's insert and removal counts at the last walk of
	// its subscriptions (walked), and how long the walk took.
	walked           bool
	inserts, removes uint64
	walk             time.Duration

	on      atomic.Bool   // the feed as last set or read
	subs    atomic.Int64  // subscribers at the last count
	changes atomic.Uint64 // times this Feed turned it on or off
}

// New returns a Feed. Call Wanted before provisioning the streams and Run
// after.
func New(cfg Config) (*Feed, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Feed{cfg: cfg, mu: make(chan struct{}, 1)}, nil
}

// lock takes f.mu, or gives up when ctx ends.
func (f *Feed) lock(ctx context.Context) error {
	select {
	case f.mu <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *Feed) unlock() { <-f.mu }

// Mode is the Feed's mode.
func (f *Feed) Mode() Mode { return f.cfg.Mode }

// Wanted reports whether the feed should be on now (On, or anyone
// subscribes), for the streams' first provisioning (streams.Config.Live),
// and takes it as the feed's state.
func (f *Feed) Wanted() bool {
	_ = f.lock(context.Background())
	defer f.unlock()
	want := f.cfg.Mode == On || f.count() > 0
	if want {
		f.seen = f.cfg.Clock()
	}
	f.on.Store(want)
	return want
}

// On reports whether the feed is on, as last set or read.
func (f *Feed) On() bool { return f.on.Load() }

// Subscribers is the number of subscriptions to the feed at the last
// count (Auto only).
func (f *Feed) Subscribers() int64 { return f.subs.Load() }

// Changes is how many times the Feed turned the feed on or off.
func (f *Feed) Changes() uint64 { return f.changes.Load() }

// Run keeps the feed as Auto wants until ctx ends: it counts the
// subscribers every Poll (less often when counting is slow, see next) and
// reads the stream's config every Reconcile. A failed update is logged
// and tried again at the next poll. In mode On it only waits for ctx: the
// streams were provisioned with the feed on, and Sync turns it on again if
// something turned it off. (Another process that embeds the server and
// runs Auto decides then.)
func (f *Feed) Run(ctx context.Context) error {
	if f.cfg.Mode == On {
		<-ctx.Done()
		return nil
	}
	t := time.NewTimer(f.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := f.check(ctx, Reconcile); err != nil && ctx.Err() == nil {
			f.logFailure(err)
		}
		t.Reset(f.next())
	}
}

// Pacing of counts and reads.
const (
	// walkShare bounds the share of one core that walking the
	// subscriptions may take: the next poll waits at least walkShare
	// times the last walk...
	walkShare = 100
	// ... but no longer than maxPoll.
	maxPoll = 2 * time.Second
	// syncRead is how old Sync lets the stream's config as last read be
	// before it reads it again.
	syncRead = time.Second
	// failLog is how often the same failure to update is logged again.
	failLog = time.Minute
)

// next is how long Run waits for its next poll: Poll, or longer when the
// last poll walked the account's subscriptions and that took long (many
// subscriptions, changing), so that walking takes at most about 1% of a
// core; never more than maxPoll.
func (f *Feed) next() time.Duration {
	_ = f.lock(context.Background())
	defer f.unlock()
	return min(max(f.cfg.Poll, walkShare*f.walk), max(f.cfg.Poll, maxPoll))
}

// logFailure logs a failed update, each distinct error once and the same
// one again failLog later: polls retry it four times a second.
func (f *Feed) logFailure(err error) {
	_ = f.lock(context.Background())
	defer f.unlock()
	now := f.cfg.Clock()
	if err.Error() == f.failed && now.Sub(f.failedAt) < failLog {
		return
	}
	f.failed, f.failedAt = err.Error(), now
	f.cfg.Logger.Warn("live feed: update failed; trying again at each poll", "err", err)
}

// Sync counts the subscribers now, turns the feed on if there is one (or
// the mode is On), and says whether the feed is on. It reads the stream's
// config when its last reading is more than a second old, rather than
// trust it, in case something else changed it.
func (f *Feed) Sync(ctx context.Context) (events.LiveStatus, error) {
	on, err := f.check(ctx, syncRead)
	return events.LiveStatus{Live: on, Mode: string(f.cfg.Mode)}, err
}

// check counts the subscribers and turns the feed on or off as wanted; it
// reads the stream's config even when nothing changed once the last
// reading is older than stale.
func (f *Feed) check(ctx context.Context, stale time.Duration) (bool, error) {
	if err := f.lock(ctx); err != nil {
		return f.on.Load(), err
	}
	defer f.unlock()
	n := f.count()
	now := f.cfg.Clock()
	if n > 0 {
		f.seen = now
	}
	on := f.on.Load()
	want := f.cfg.Mode == On || n > 0 || (on && now.Sub(f.seen) < f.cfg.Hold)
	if want == on && now.Sub(f.reconcil) < stale {
		return on, nil
	}
	changed, err := streams.SetLive(ctx, f.cfg.JetStream, want)
	if err != nil {
		return on, err
	}
	f.failed = ""
	f.reconcil = now
	f.on.Store(want)
	if changed {
		f.changes.Add(1)
		if want {
			f.cfg.Logger.Info("live feed on", "subscribers", n, "mode", f.cfg.Mode)
		} else {
			f.cfg.Logger.Info("live feed off: no subscribers", "for", f.cfg.Hold, "mode", f.cfg.Mode)
		}
	}
	return want, nil
}

// count returns the number of subscriptions in the account whose subject
// overlaps the live feed's (0 in mode On). Walking the account's
// subscriptions costs about a microsecond each (BenchmarkCount), so it
// walks them only when the account's sublist counts an insert or a removal
// since the last walk: the same counts mean the same subscriptions. The
// caller holds f.mu.
func (f *Feed) count() int {
	if f.cfg.Mode == On {
		return 0
	}
	st, err := f.cfg.Server.Subsz(&server.SubszOptions{Account: f.cfg.Account})
	if err == nil && f.walked && st.NumInserts == f.inserts && st.NumRemoves == f.removes {
		f.walk = 0
		return int(f.subs.Load())
	}
	start := time.Now()
	sz, err := f.cfg.Server.Subsz(&server.SubszOptions{Account: f.cfg.Account, Subscriptions: true, Limit: math.MaxInt32})
	if err != nil {
		// Only a bad test subject fails, and there is none.
		f.cfg.Logger.Error("live feed: counting subscribers", "err", err)
		return 0
	}
	n := 0
	for _, s := range sz.Subs {
		if server.SubjectsCollide(s.Subject, events.LiveSubjects) {
			n++
		}
	}
	// The counts from before the walk: a change during it shows next
	// time.
	f.walked = st != nil
	if st != nil {
		f.inserts, f.removes = st.NumInserts, st.NumRemoves
	}
	f.walk = time.Since(start)
	f.subs.Store(int64(n))
	return n
}
