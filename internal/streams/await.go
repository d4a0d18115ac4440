package streams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TryTimeout bounds one try of a JetStream API call made through Await:
// a cluster without a leader leaves requests unanswered, and a try that
// waits for ever would use up the whole start deadline.
const TryTimeout = 5 * time.Second

// Await calls try until it succeeds, returns an error that is not
// Transient, or ctx ends, waiting between tries (100ms, doubling to 2s)
// and logging what it waits for. Each try gets at most TryTimeout. It is
// how a process comes up on a cluster that is still electing its leaders,
// or that several processes provision at once.
func Await(ctx context.Context, log *slog.Logger, what string, try func(ctx context.Context) error) error {
	wait := 100 * time.Millisecond
	start := time.Now()
	for n := 1; ; n++ {
		tctx, cancel := context.WithTimeout(ctx, TryTimeout)
		err := try(tctx)
		cancel()
		if err == nil {
			if n > 1 {
				log.Info("JetStream answered", "what", what, "tries", n, "waited", time.Since(start).Round(time.Millisecond))
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: gave up after %s and %d tries: %w (last error: %w)", what, time.Since(start).Round(time.Millisecond), n, ctx.Err(), err)
		}
		if !Transient(err) {
			return err
		}
		log.Warn("waiting for JetStream", "what", what, "try", n, "err", err)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return fmt.Errorf("%s: gave up after %s and %d tries: %w (last error: %w)", what, time.Since(start).Round(time.Millisecond), n, ctx.Err(), err)
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// transientCodes are the JetStream API error codes of a cluster that is
// settling: no leader yet, not every peer up yet, a proposal lost to an
// election.
var transientCodes = []jetstream.ErrorCode{
	10004, // JSClusterIncompleteErr: incomplete results
	10005, // JSClusterNoPeersErrF: not enough peers up for the replicas
	10008, // JSClusterNotAvailErr: JetStream system temporarily unavailable
	10009, // JSClusterNotLeaderErr: the cluster cannot handle the request now
	10041, // JSRaftGeneralErrF
	10118, // JSStreamOfflineErr
	10119, // JSConsumerOfflineErr
	10163, // JSStreamExpectedLastSeqPerSubjectNotReady
}

// Transient reports whether err is what a JetStream cluster answers while
// it settles (no responders, a timeout, no leader, a lost connection),
// worth another try, rather than a refusal that another try would meet
// again (a bad config, a permission).
func Transient(err error) bool {
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, jetstream.ErrNoHeartbeat) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return slices.Contains(transientCodes, apiErr.ErrorCode)
	}
	return false
}

// Open returns a handle of the stream name, trying again while the
// cluster settles (Await).
func Open(ctx context.Context, js jetstream.JetStream, log *slog.Logger, name string) (jetstream.Stream, error) {
	var st jetstream.Stream
	err := Await(ctx, log, "stream "+name, func(ctx context.Context) error {
		var err error
		st, err = js.Stream(ctx, name)
		return err
	})
	return st, err
}

// PullExpiry is how long a pull request of Airlock's consumers lasts
// before it is made again; its heartbeats come every half of it, and two
// missed ones make the client pull again. The client's default, 30 s,
// leaves a consumer whose leader node was lost without deliveries for up
// to 30 s; 5 s bounds that to about 5 s, for a new request every 5 s
// while idle.
const PullExpiry = 5 * time.Second
