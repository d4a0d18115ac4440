package projector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/periodic"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// ExpirySource is the ce-source of the op.expired events the expirer
// writes.
const ExpirySource = "airlock/expirer"

// DefaultExpiryInterval is how often the expirer looks for holds past
// their expiry.
const DefaultExpiryInterval = time.Second

// ExpirerConfig configures an Expirer.
type ExpirerConfig struct {
	// JetStream appends op.expired events. Required.
	JetStream jetstream.JetStream
	// Store is the projection whose held ops it scans. Required.
	Store *store.Store
	// Interval between scans; default DefaultExpiryInterval.
	Interval time.Duration
	// Clock tells the time; default time.Now.
	Clock func() time.Time
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Expirer ends holds nobody resolved in time: each held op past its
// expiry gets op.expired, appended with compare-and-swap on the op, so a
// grant racing the expiry either lands first (and the expiry is dropped)
// or is refused. Holds fail closed without anyone acting. Several
// expirers (one per process) are safe together.
type Expirer struct {
	cfg ExpirerConfig
	w   *oplog.Writer // its own, closed when Run returns
}

// NewExpirer returns an expirer.
func NewExpirer(cfg ExpirerConfig) (*Expirer, error) {
	if cfg.JetStream == nil || cfg.Store == nil {
		return nil, errors.New("projector: expirer: JetStream and Store are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultExpiryInterval
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w, err := oplog.NewWriter(cfg.JetStream)
	if err != nil {
		return nil, fmt.Errorf("projector: expirer: %w", err)
	}
	return &Expirer{cfg: cfg, w: w}, nil
}

// Run scans until ctx ends.
func (e *Expirer) Run(ctx context.Context) error {
	return sweeps(ctx, e.w, e.cfg.Logger, e.cfg.Interval, "hold expiry scan", e.Sweep)
}

// sweeps opens the ops stream and runs sweep on it each interval until
// ctx ends, logging what fails as what; it closes w when done.
func sweeps(ctx context.Context, w *oplog.Writer, log *slog.Logger, interval time.Duration, what string,
	sweep func(context.Context, jetstream.Stream) (int, error)) error {
	defer w.Close()
	st, err := streams.Open(ctx, w.JetStream(), log, streams.Ops)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return err
	}
	periodic.Every(ctx, interval, func() {
		if n, err := sweep(ctx, st); err != nil && ctx.Err() == nil {
			log.Warn(what, "err", err, "done", n)
		}
	})
	return nil
}

// Sweep expires every held op past its expiry and returns how many it
// expired.
func (e *Expirer) Sweep(ctx context.Context, st jetstream.Stream) (int, error) {
	now := e.cfg.Clock()
	n := 0
	cursor := ""
	for {
		ops, next, err := e.cfg.Store.List(events.StateHeld, "", cursor, store.MaxPage)
		if err != nil {
			return n, err
		}
		for _, op := range ops {
			if op.HoldExpiresAt == nil || now.Before(*op.HoldExpiresAt) {
				continue
			}
			ex := &events.Expired{OpHeader: events.OpHeader{OpID: op.ID, Workspace: op.Workspace}, HoldID: op.HoldID}
			o := oplog.Op{Workspace: op.Workspace, ID: op.ID, Tool: op.Tool}
			seq, err := e.w.Append(ctx, st, o, op.Version, events.TypeExpired, ExpirySource, ex)
			switch {
			case oplog.IsConflict(err):
				// Resolved, or expired by someone else, since the
				// projection saw it; the projection will catch up.
			case err != nil:
				return n, err
			default:
				n++
				e.cfg.Logger.Info("hold expired", "op", op.ID, "ws", op.Workspace, "hold", op.HoldID, "seq", seq)
			}
		}
		if next == "" {
			return n, nil
		}
		cursor = next
	}
}
