// Package streams provisions Airlock's JetStream streams idempotently: each
// start creates what is missing and updates what exists. It also names the
// durable consumers, which the gate and the executor runner create or
// update when they start. docs/subjects.md describes the result.
package streams

import (
	"context"
	"fmt"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/nats-io/nats.go/jetstream"
)

// Stream and consumer names.
const (
	// Events holds requests, rejections and every op transition: the one
	// ordered log the projector folds.
	Events = "AIRLOCK_EVENTS"
	// Work holds work items for executors (work-queue retention).
	Work = "AIRLOCK_WORK"
	// GateConsumer is the gate's durable consumer of requests.
	GateConsumer = "airlock-gate"
	// MaxMsgBytes bounds one message in the events stream.
	MaxMsgBytes = 2 << 20
	// MaxWorkItemBytes bounds one work item.
	MaxWorkItemBytes = 4 << 10
)

// ExecutorConsumer is the durable consumer of one tool's work items.
func ExecutorConsumer(tool string) string { return "airlock-exec-" + tool }

// Config configures the streams. The zero value is valid.
type Config struct {
	// Replicas is the replica count of each stream; 0 means 1.
	Replicas int
	// Duplicates is the Nats-Msg-Id dedupe window; 0 means 2 minutes. It
	// is the first line of defence only: an op's subject makes a request
	// idempotent for ever.
	Duplicates time.Duration
	// Memory stores the streams in memory instead of files (benchmarks).
	Memory bool
}

func (c Config) withDefaults() Config {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Duplicates == 0 {
		c.Duplicates = 2 * time.Minute
	}
	return c
}

// EventsConfig is the configuration of the events stream.
func EventsConfig(c Config) jetstream.StreamConfig {
	c = c.withDefaults()
	return jetstream.StreamConfig{
		Name:        Events,
		Description: "Airlock requests, rejections and op transitions",
		Subjects:    []string{events.RequestSubjects, events.OpSubjects, events.RejectedSubjects},
		Retention:   jetstream.LimitsPolicy,
		Storage:     storage(c),
		Replicas:    c.Replicas,
		Duplicates:  c.Duplicates,
		MaxMsgSize:  MaxMsgBytes,
		Discard:     jetstream.DiscardNew,
		AllowDirect: true,
		DenyPurge:   true,
	}
}

// WorkConfig is the configuration of the work stream.
func WorkConfig(c Config) jetstream.StreamConfig {
	c = c.withDefaults()
	return jetstream.StreamConfig{
		Name:        Work,
		Description: "Airlock work items, one per ready op",
		Subjects:    []string{events.WorkSubjects},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     storage(c),
		Replicas:    c.Replicas,
		Duplicates:  c.Duplicates,
		MaxMsgSize:  MaxWorkItemBytes,
		Discard:     jetstream.DiscardNew,
	}
}

func storage(c Config) jetstream.StorageType {
	if c.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// Provision creates or updates both streams.
func Provision(ctx context.Context, js jetstream.JetStream, c Config) error {
	for _, sc := range []jetstream.StreamConfig{EventsConfig(c), WorkConfig(c)} {
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("provision stream %s: %w", sc.Name, err)
		}
	}
	return nil
}
