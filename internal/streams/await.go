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

// AwaitConsumer is Await for a call that creates or updates the durable
// consumer name. Besides a settling cluster, it waits out a consumer of
// that name that is still being deleted: the server answers a create or
// update that meets one "consumer does not exist" (10149), or a create
// error (10012: "consumer closed", "error creating store for consumer", a
// file of the consumer's directory not found), and the next try, after
// the delete, succeeds. Every other failure to make a consumer's store is
// a 10012 too (a full disk): it is waited on as well, with a warning at
// each try, until ctx ends.
func AwaitConsumer(ctx context.Context, log *slog.Logger, name string, create func(ctx context.Context) (jetstream.Consumer, error)) (jetstream.Consumer, error) {
	var cons jetstream.Consumer
	err := Await(ctx, log, "consumer "+name, func(ctx context.Context) error {
		c, err := create(ctx)
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeConsumerDoesNotExist ||
			apiErr.ErrorCode == jetstream.JSErrCodeConsumerCreate) {
			return fmt.Errorf("%w: %w", errConsumerClosing, err)
		}
		cons = c
		return err
	})
	return cons, err
}

// errConsumerClosing marks a create or update that met a consumer still
// being deleted (AwaitConsumer); it is Transient.
var errConsumerClosing = errors.New("the consumer may still be being deleted")

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
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, jetstream.ErrNoHeartbeat) ||
		errors.Is(err, errConsumerClosing) {
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
