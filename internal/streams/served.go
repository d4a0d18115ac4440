package streams

import (
	"context"
	"encoding/json"
	"fmt"
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
	filters []string      // of the executor consumers, as last listed
	loading chan struct{} // closed when the listing in flight ends; nil when none is
	lastErr error         // of the last listing
}

// ServedListTimeout bounds one listing of the consumers.
const ServedListTimeout = 2 * time.Second

// NewServed returns a directory that lists AIRLOCK_OPS's consumers with js.
func NewServed(js jetstream.JetStream, log *slog.Logger) *Served {
	return &Served{js: js, log: log}
}

// Serves reports whether some executor group takes tool's decided events
// in workspace ws. A tool and workspace the last list has are served
// (a group whose consumer was removed since only makes its ops wait); one
// it lacks is looked for in a list read again now, so a no never rests on
// an old list. When the consumers cannot be listed (a cluster electing
// its leaders), it says yes: the op then waits for an executor, which is
// safe, rather than being denied for a transient fault. No lock is held
// while the list is read; concurrent misses share one listing.
func (s *Served) Serves(ctx context.Context, ws, tool string) bool {
	s.mu.Lock()
	if matchAny(s.filters, ws, tool) {
		s.mu.Unlock()
		return true
	}
	filters, err := s.relist(ctx)
	if err != nil {
		s.log.Warn("listing the executor consumers; letting the op wait for an executor", "ws", ws, "tool", tool, "err", err)
		return true
	}
	return matchAny(filters, ws, tool)
}

// relist lists the consumers again, or waits for the listing in flight,
// and returns the filters; the caller holds mu, which relist releases.
func (s *Served) relist(ctx context.Context) ([]string, error) {
	if ch := s.loading; ch != nil {
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.filters, s.lastErr
	}
	ch := make(chan struct{})
	s.loading = ch
	s.mu.Unlock()
	filters, err := ListExecutorFilters(ctx, s.js)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.filters = filters
	}
	s.lastErr = err
	s.loading = nil
	close(ch)
	return filters, err
}

func matchAny(filters []string, ws, tool string) bool {
	for _, f := range filters {
		if events.ReadyFilterServes(f, ws, tool) {
			return true
		}
	}
	return false
}

// ListExecutorFilters lists the filter subjects of AIRLOCK_OPS's durable
// consumers, page by page with the JetStream API, every request bounded by
// ctx and ServedListTimeout in all.
func ListExecutorFilters(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, ServedListTimeout)
	defer cancel()
	var filters []string
	for offset := 0; ; {
		req, _ := json.Marshal(struct {
			Offset int `json:"offset"`
		}{offset})
		m, err := js.Conn().RequestWithContext(ctx, "$JS.API.CONSUMER.LIST."+Ops, req)
		if err != nil {
			return nil, fmt.Errorf("list consumers: %w", err)
		}
		var page struct {
			Error     *jetstream.APIError       `json:"error"`
			Total     int                       `json:"total"`
			Consumers []*jetstream.ConsumerInfo `json:"consumers"`
		}
		if err := json.Unmarshal(m.Data, &page); err != nil {
			return nil, fmt.Errorf("list consumers: %w", err)
		}
		if page.Error != nil {
			return nil, fmt.Errorf("list consumers: %w", page.Error)
		}
		for _, c := range page.Consumers {
			if c != nil && c.Config.Durable != "" {
				filters = append(filters, Filters(c.Config)...)
			}
		}
		offset += len(page.Consumers)
		if len(page.Consumers) == 0 || offset >= page.Total {
			return filters, nil
		}
	}
}
