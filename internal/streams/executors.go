package streams

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrGroupMismatch is returned when an executor group's consumer takes
// other workspaces than a process of the group serves.
var ErrGroupMismatch = errors.New("executor group serves other workspaces")

// Filters are a consumer's filter subjects, whichever field holds them,
// sorted.
func Filters(c jetstream.ConsumerConfig) []string {
	out := slices.Clone(c.FilterSubjects)
	if c.FilterSubject != "" {
		out = append(out, c.FilterSubject)
	}
	slices.Sort(out)
	return out
}

// ExecutorConsumerFor creates or updates an executor group's durable
// consumer of one tool. want's filter subjects (FilterSubjects, one or
// more) are the workspaces the calling process serves: a consumer that
// exists with other filters belongs to processes of the same group that
// serve other workspaces, and is left as it is, with an error wrapping
// ErrGroupMismatch that says so. One filter is set as FilterSubject, the
// way earlier versions created the consumer. The consumer keeps its ack
// wait when it is longer than want's (see LongerAckWait).
func ExecutorConsumerFor(ctx context.Context, js jetstream.JetStream, want jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	filters := slices.Clone(want.FilterSubjects)
	slices.Sort(filters)
	want.FilterSubject, want.FilterSubjects = "", filters
	if len(filters) == 1 {
		want.FilterSubject, want.FilterSubjects = filters[0], nil
	}
	have, err := js.Consumer(ctx, Ops, want.Durable)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
	case err != nil:
		return nil, err
	default:
		if got := Filters(have.CachedInfo().Config); !slices.Equal(got, filters) {
			return nil, fmt.Errorf("%w: consumer %s takes %s, this process serves %s: give every process of a group the same --workspaces, or another --executor-group",
				ErrGroupMismatch, want.Durable, strings.Join(got, " "), strings.Join(filters, " "))
		}
		// The ack wait only grows (see LongerAckWait).
		want.AckWait = max(want.AckWait, have.CachedInfo().Config.AckWait)
	}
	return js.CreateOrUpdateConsumer(ctx, Ops, want)
}
