package streams

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A durable consumer that several processes share (the gate's, an
// executor group's) has one ack wait, and each process keeps what it
// holds in progress every third of its own claim timeout. Were the ack
// wait the claim timeout of whichever process created or updated the
// consumer last, a process with a shorter one would make the others'
// live work come back, to be taken for lost: a live attempt recovered.
// So the ack wait only grows: a process sets the longer of its own claim
// timeout and the one the consumer has, and raises it again should
// another process lower it (KeepAckWait). A process whose claim timeout
// is the shorter one then waits longer than it asked for a dead process's
// work; it never takes live work for lost. Lowering the claim timeout of
// a deployment takes `nats consumer edit --wait` once every process runs
// with the new one.

// LongerAckWait sets cc.AckWait to the consumer's ack wait when the
// consumer exists with a longer one, and says so in log; a consumer that
// does not exist leaves cc as it is. Any other error is returned: the
// consumer must not be written without knowing its ack wait.
func LongerAckWait(ctx context.Context, js jetstream.JetStream, stream string, cc *jetstream.ConsumerConfig, log *slog.Logger) error {
	have, err := js.Consumer(ctx, stream, cc.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if w := have.CachedInfo().Config.AckWait; w > cc.AckWait {
		log.Info("keeping the consumer's longer ack wait: another process of this deployment has a longer claim timeout",
			"consumer", cc.Durable, "ack_wait", w, "claim_timeout", cc.AckWait)
		cc.AckWait = w
	}
	return nil
}

// KeepAckWait checks at once and then every period, until ctx ends, that
// the consumer's ack wait is at least min, and raises it to min when
// another process (one that started at the same moment, or an older
// version) set it lower. It logs each raise.
func KeepAckWait(ctx context.Context, js jetstream.JetStream, stream, durable string, min, period time.Duration, log *slog.Logger) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		if err := raiseAckWait(ctx, js, stream, durable, min, log); err != nil && ctx.Err() == nil {
			log.Debug("checking the consumer's ack wait", "consumer", durable, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func raiseAckWait(ctx context.Context, js jetstream.JetStream, stream, durable string, min time.Duration, log *slog.Logger) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cons, err := js.Consumer(cctx, stream, durable)
	if err != nil {
		return err
	}
	cc := cons.CachedInfo().Config
	if cc.AckWait >= min {
		return nil
	}
	log.Warn("raising the consumer's ack wait to this process's claim timeout: another process set a shorter one, which would take this process's live work for lost; give every process the same --claim-timeout",
		"consumer", durable, "ack_wait", cc.AckWait, "claim_timeout", min)
	cc.AckWait = min
	_, err = js.UpdateConsumer(cctx, stream, cc)
	if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDoesNotExist) {
		return nil
	}
	return err
}
