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
}

// ServedMaxAge is how long a list of the consumers answers for what it
// has; a tool and workspace it lacks are always looked for again, so that
// a denial never rests on an old list.
const ServedMaxAge = 5 * time.Second

// NewServed returns a directory that lists AIRLOCK_OPS's consumers with js.
func NewServed(js jetstream.JetStream, log *slog.Logger) *Served {
	return &Served{js: js, log: log}
}

// Serves reports whether some executor group takes tool's decided events
// in workspace ws. A no is always from a list read just now; when the
// consumers cannot be listed it says yes: the op then waits for an
// executor, which is safe, rather than being denied for a transient fault.
func (s *Served) Serves(ctx context.Context, ws, tool string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	fresh := !s.loaded.IsZero() && time.Since(s.loaded) < ServedMaxAge
	if fresh && s.match(ws, tool) {
		return true
	}
	if err := s.load(ctx); err != nil {
		// The op then waits for an executor rather than being denied on
		// a list that may be old.
		s.log.Warn("listing the executor consumers", "err", err)
		return true
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
