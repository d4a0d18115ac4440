package streams

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/nats-io/nats.go/jetstream"
)

// Served tells which tools and workspaces some executor group of the
// deployment serves, from the durable consumers on AIRLOCK_OPS that take
// decided events: a group's consumer is its standing statement of what it
// serves, whether or not its processes run right now. It is safe for
// concurrent use.
type Served struct {
	js  jetstream.JetStream
	log *slog.Logger

	mu      sync.Mutex
	filters []string // of the executor consumers, as last listed
	loaded  time.Time
	tried   time.Time
}

// Served's timings: a list is reused for ServedMaxAge; a miss lists again,
// at most once per ServedRetry.
const (
	ServedMaxAge = 5 * time.Second
	ServedRetry  = 250 * time.Millisecond
)

// NewServed returns a directory that lists AIRLOCK_OPS's consumers with js.
func NewServed(js jetstream.JetStream, log *slog.Logger) *Served {
	return &Served{js: js, log: log}
}

// Serves reports whether some executor group takes tool's decided events
// in workspace ws. When the consumers cannot be listed and never were, it
// says yes: the op then waits for an executor, which is safe, rather than
// being denied for a transient fault.
func (s *Served) Serves(ctx context.Context, ws, tool string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	fresh := !s.loaded.IsZero() && time.Since(s.loaded) < ServedMaxAge
	if fresh && s.match(ws, tool) {
		return true
	}
	if time.Since(s.tried) >= ServedRetry || s.loaded.IsZero() {
		s.tried = time.Now()
		if err := s.load(ctx); err != nil {
			s.log.Warn("listing the executor consumers", "err", err)
			if s.loaded.IsZero() {
				return true
			}
		}
	}
	return s.match(ws, tool)
}

func (s *Served) match(ws, tool string) bool {
	for _, f := range s.filters {
		if events.ReadyFilterServes(f, ws, tool) {
			return true
		}
	}
	return false
}

// load lists the durable consumers of the ops stream; the caller holds mu.
func (s *Served) load(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := s.js.Stream(ctx, Ops)
	if err != nil {
		return err
	}
	var filters []string
	l := st.ListConsumers(ctx)
	for info := range l.Info() {
		if info.Config.Durable == "" {
			continue
		}
		filters = append(filters, Filters(info.Config)...)
	}
	if err := l.Err(); err != nil {
		return err
	}
	s.filters, s.loaded = filters, time.Now()
	return nil
}
