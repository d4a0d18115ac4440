package gate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// modes holds the operators' mode controls in force, one per workspace:
// the newest dev.airlock.mode.set.v1 on each airlock.v1.sys.mode.<ws>.
// New requests are decided against it; resumes read the stream afresh.
type modes struct {
	mu  sync.RWMutex
	ws  map[string]*events.ModeSet
	seq map[string]uint64
}

func newModes() *modes {
	return &modes{ws: map[string]*events.ModeSet{}, seq: map[string]uint64{}}
}

// set records a control read at stream sequence seq, unless a newer one is
// already known.
func (m *modes) set(ms *events.ModeSet, seq uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if seq <= m.seq[ms.Workspace] {
		return
	}
	m.ws[ms.Workspace], m.seq[ms.Workspace] = ms, seq
}

// override is the mode a control imposes on ws at now, or "".
func (m *modes) override(ws string, now time.Time) policy.Mode {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return policy.Mode(m.ws[ws].InForce(now))
}

// load reads the newest control of every workspace, and returns the
// stream's last sequence, from which watch carries on.
func (g *Gate) loadModes(ctx context.Context) (uint64, error) {
	info, err := g.ops.Info(ctx, jetstream.WithSubjectFilter(events.ModeSubjects))
	if err != nil {
		return 0, fmt.Errorf("gate: mode controls: %w", err)
	}
	for subject := range info.State.Subjects {
		ms, seq, err := g.readMode(ctx, strings.TrimPrefix(subject, events.ModeSubject("")))
		if err != nil {
			return 0, err
		}
		if ms != nil {
			g.modes.set(ms, seq)
		}
	}
	return info.State.LastSeq, nil
}

// readMode reads the newest control of ws from the stream: nil when there
// is none.
func (g *Gate) readMode(ctx context.Context, ws string) (*events.ModeSet, uint64, error) {
	raw, err := g.ops.GetLastMsgForSubject(ctx, events.ModeSubject(ws))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("gate: mode control of %s: %w", ws, err)
	}
	_, _, data, err := events.DecodeStored(raw.Header, raw.Data)
	if err != nil {
		return nil, 0, fmt.Errorf("gate: mode control of %s at %d: %w", ws, raw.Sequence, err)
	}
	ms, ok := data.(*events.ModeSet)
	if !ok || ms.Workspace != ws {
		return nil, 0, fmt.Errorf("gate: mode control of %s at %d is a %T for %q", ws, raw.Sequence, data, ws)
	}
	return ms, raw.Sequence, nil
}

// freshOverride is the mode a control imposes on ws now, read from the
// stream rather than the cache: a resume must see every lockdown that
// was acknowledged before it, whichever process took it.
func (g *Gate) freshOverride(ctx context.Context, ws string) (policy.Mode, error) {
	ms, seq, err := g.readMode(ctx, ws)
	if err != nil {
		return "", err
	}
	if ms == nil {
		return "", nil
	}
	g.modes.set(ms, seq)
	return policy.Mode(ms.InForce(g.cfg.Clock())), nil
}

// watchModes follows controls that other processes record, from seq on.
func (g *Gate) watchModes(ctx context.Context, from uint64) error {
	// Made while the cluster may have no leader (a node lost as the
	// process starts): tried again until it answers, as every consumer.
	var cons jetstream.Consumer
	err := streams.Await(ctx, g.cfg.Logger, "mode controls consumer", func(tctx context.Context) error {
		var err error
		cons, err = g.ops.OrderedConsumer(tctx, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{events.ModeSubjects},
			DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
			OptStartSeq:    from + 1,
		})
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("gate: watch mode controls: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			return
		}
		_, _, data, err := events.DecodeStored(m.Headers(), m.Data())
		if ms, ok := data.(*events.ModeSet); err == nil && ok {
			g.modes.set(ms, md.Sequence.Stream)
		}
	}, jetstream.PullExpiry(streams.PullExpiry))
	if err != nil {
		return fmt.Errorf("gate: watch mode controls: %w", err)
	}
	<-ctx.Done()
	cc.Stop()
	return nil
}
