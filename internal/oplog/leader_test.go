package oplog_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A direct get of a request that a replica behind the leader answers says
// "not found" though the request is stored. RequestMsg asks the leader
// then, and only the leader's "not found" is REQUEST_UNAVAILABLE.
func TestRequestFromAReplicaBehind(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	ctx := context.Background()
	req := events.Request{Workspace: "lag", Agent: "a", Tool: "echo", Args: json.RawMessage(`{"n":1}`)}
	require.NoError(t, req.Validate())
	body, err := json.Marshal(req)
	require.NoError(t, err)
	testenv.StaleRequestsResponder(t, n)
	ack, err := n.JetStream.PublishMsg(ctx, events.NewMessage(events.RequestSubject("lag", "a"), events.TypeRequested, "test", "", req.FingerprintHex(), body))
	require.NoError(t, err)
	op := events.OpID(req.Fingerprint())
	reqs, err := n.JetStream.Stream(ctx, streams.Requests)
	require.NoError(t, err)

	// The stale responder answers some direct gets: read alone, as a
	// client without the stream API reads, some say "gone".
	gone := 0
	for range 40 {
		if _, err := oplog.Request(ctx, nil, reqs, ack.Sequence, op); events.CodeOf(err) == events.CodeRequestUnavailable {
			gone++
		}
	}
	require.Positive(t, gone, "the stale responder never answered: the test shows nothing")

	// With the stream API, every read finds it.
	for i := range 40 {
		got, err := oplog.Request(ctx, n.JetStream, reqs, ack.Sequence, op)
		require.NoError(t, err, "read %d", i)
		assert.JSONEq(t, `{"n":1}`, string(got.Args))
	}

	// A request that is really gone is still REQUEST_UNAVAILABLE.
	require.NoError(t, reqs.DeleteMsg(ctx, ack.Sequence))
	_, err = oplog.Request(ctx, n.JetStream, reqs, ack.Sequence, op)
	assert.Equal(t, events.CodeRequestUnavailable, events.CodeOf(err), "%v", err)
	_, err = oplog.LeaderMsg(ctx, n.JetStream, streams.Requests, ack.Sequence)
	assert.ErrorIs(t, err, jetstream.ErrMsgNotFound)
}
