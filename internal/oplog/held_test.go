package oplog_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A move copies the delivered request into AIRLOCK_HELD with the
// request's own headers, and deletes it from AIRLOCK_REQUESTS; a second
// move keeps the first copy; EraseHeld erases the copy once and then
// finds none.
func TestMoveToHeldThenEraseHeld(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js := n.JetStream
	reqs, err := js.Stream(ctx, streams.Requests)
	require.NoError(t, err)
	held, err := js.Stream(ctx, streams.Held)
	require.NoError(t, err)

	req := events.Request{Workspace: "w", Agent: "a", Tool: "echo", Args: json.RawMessage(`{"still":"held"}`)}
	require.NoError(t, req.Validate())
	fp, id := req.Identity()
	body, err := events.MarshalJSON(req)
	require.NoError(t, err)
	m := events.NewMessage(events.RequestSubject("w", "a"), events.TypeRequested, "test", id, fp, body)
	m.Header.Set(jetstream.MsgIDHeader, fp)
	ack, err := js.PublishMsg(ctx, m)
	require.NoError(t, err)

	for range 2 {
		require.NoError(t, oplog.MoveToHeld(ctx, js, reqs, ack.Sequence, id, m.Header, m.Data))
	}
	_, err = reqs.GetMsg(ctx, ack.Sequence)
	assert.ErrorIs(t, err, jetstream.ErrMsgNotFound, "the request left %s", streams.Requests)
	info, err := held.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), info.State.Msgs, "one copy")
	raw, err := held.GetLastMsgForSubject(ctx, events.HeldSubject(id))
	require.NoError(t, err)
	assert.JSONEq(t, `{"still":"held"}`, string(mustArgs(t, raw)))
	assert.Equal(t, string(events.TypeRequested), raw.Header.Get("ce-type"), "the request's own headers")
	assert.Equal(t, "held."+id, raw.Header.Get(jetstream.MsgIDHeader), "the move's own Nats-Msg-Id, not the request's")

	found, err := oplog.EraseHeld(ctx, held, id)
	require.NoError(t, err)
	assert.True(t, found)
	found, err = oplog.EraseHeld(ctx, held, id)
	require.NoError(t, err)
	assert.False(t, found, "no copy counts as erased, and says so")
}

func mustArgs(t *testing.T, raw *jetstream.RawStreamMsg) json.RawMessage {
	t.Helper()
	req, err := events.DecodeRequest(raw.Header, raw.Data)
	require.NoError(t, err)
	return req.Args
}
