package streams

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// RedeliverOrphans resets every durable consumer of stream that has
// messages delivered and not acknowledged, and no pull request waiting,
// back to its acknowledgement floor: JetStream delivers those messages
// again now, instead of one AckWait (the claim timeout) after they were
// last delivered. It is for a process that knows it is the only consumer
// (the embedded server, at start, before anything pulls): every such
// message was left by its own previous life, which is gone. What comes
// again is settled as any redelivery is (an op that ended is answered,
// this instance's lost claims are recovered at once). It returns how many
// messages were pending.
//
// The reset is nats-server's $JS.API.CONSUMER.RESET (2.14 and later).
func RedeliverOrphans(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, stream string, log *slog.Logger) (int, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("streams: orphans of %s: %w", stream, err)
	}
	total := 0
	lister := st.ListConsumers(ctx)
	for info := range lister.Info() {
		if info.Config.Durable == "" || info.NumAckPending == 0 || info.NumWaiting > 0 {
			continue
		}
		if err := resetConsumer(ctx, nc, stream, info.Name); err != nil {
			return total, err
		}
		log.Info("redelivering what this process's previous life left unacknowledged",
			"stream", stream, "consumer", info.Name, "messages", info.NumAckPending, "ack_floor", info.AckFloor.Stream)
		total += info.NumAckPending
	}
	if err := lister.Err(); err != nil {
		return total, fmt.Errorf("streams: orphans of %s: %w", stream, err)
	}
	return total, nil
}

func resetConsumer(ctx context.Context, nc *nats.Conn, stream, consumer string) error {
	msg, err := nc.RequestWithContext(ctx, fmt.Sprintf("$JS.API.CONSUMER.RESET.%s.%s", stream, consumer), []byte("{}"))
	if err != nil {
		return fmt.Errorf("streams: reset consumer %s: %w", consumer, err)
	}
	var resp struct {
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("streams: reset consumer %s: %w", consumer, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("streams: reset consumer %s: %w", consumer, resp.Error)
	}
	return nil
}
