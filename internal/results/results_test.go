package results_test

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/results"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newStore(t *testing.T) (*results.Store, *testenv.NATS) {
	t.Helper()
	n := testenv.StartNATS(t, streams.Config{})
	own, err := results.DeploymentKey(t.TempDir())
	require.NoError(t, err)
	return results.New(n.JetStream, results.DeploymentKeys{Opener: own}, own, nil), n
}

func kept(ws, op, attempt, body string) events.KeptResult {
	return events.KeptResult{Workspace: ws, OpID: op, Attempt: attempt, Agent: "a1", Result: []byte(body),
		Retention: events.Retention{TTLSeconds: 3600}}
}

// Every result of a workspace is a message on its one subject, read and
// erased by the sequence its completed event names: the server's index
// holds one subject per workspace, not one per kept result.
func TestResultsShareTheirWorkspacesSubject(t *testing.T) {
	rs, n := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var seqs []uint64
	for i, op := range []string{"op_1", "op_2", "op_3"} {
		k, err := rs.Keep(ctx, kept("w", op, "A", `{"n":`+string(rune('1'+i))+`}`))
		require.NoError(t, err)
		require.NotNil(t, k.Until)
		require.NotZero(t, k.Seq)
		seqs = append(seqs, k.Seq)
	}
	st, err := n.JetStream.Stream(ctx, streams.Results)
	require.NoError(t, err)
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(events.ResultSubjects))
	require.NoError(t, err)
	assert.Equal(t, map[string]uint64{events.ResultSubject("w"): 3}, info.State.Subjects)

	sealed, err := rs.Get(ctx, "w", "op_2", "A", seqs[1])
	require.NoError(t, err)
	plain, ok, err := rs.Open("op_2", sealed)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, `{"n":2}`, string(plain))

	// The sequence names one op's attempt: read as another's, it is not
	// there, and erased as another's, nothing goes.
	for _, other := range [][2]string{{"w", "op_1"}, {"other", "op_2"}} {
		_, err = rs.Get(ctx, other[0], other[1], "A", seqs[1])
		require.ErrorIs(t, err, results.ErrGone)
		require.NoError(t, rs.Erase(ctx, other[0], other[1], "A", seqs[1]))
	}
	_, err = rs.Get(ctx, "w", "op_2", "B", seqs[1])
	require.ErrorIs(t, err, results.ErrGone)
	require.NoError(t, rs.Erase(ctx, "w", "op_2", "B", seqs[1]))
	_, err = rs.Get(ctx, "w", "op_2", "A", seqs[1])
	require.NoError(t, err, "still there")

	// Erased, it is gone, and erasing it again is not an error; the
	// others stay.
	require.NoError(t, rs.Erase(ctx, "w", "op_2", "A", seqs[1]))
	_, err = rs.Get(ctx, "w", "op_2", "A", seqs[1])
	require.ErrorIs(t, err, results.ErrGone)
	require.NoError(t, rs.Erase(ctx, "w", "op_2", "A", seqs[1]))
	for _, i := range []int{0, 2} {
		_, err := rs.Get(ctx, "w", []string{"op_1", "op_2", "op_3"}[i], "A", seqs[i])
		require.NoError(t, err)
	}
}

// A stream made again starts its sequences at 1: the result an earlier op
// kept at a sequence is gone, and another op's result there now is not
// read or erased in its place.
func TestResultsOfAStreamMadeAgainAreNotTakenForEachOther(t *testing.T) {
	rs, n := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	old, err := rs.Keep(ctx, kept("w", "op_old", "A", `{"old":1}`))
	require.NoError(t, err)
	require.NoError(t, n.JetStream.DeleteStream(ctx, streams.Results))
	require.NoError(t, streams.Provision(ctx, n.JetStream, streams.Config{}))
	fresh, err := rs.Keep(ctx, kept("w", "op_new", "A", `{"new":1}`))
	require.NoError(t, err)
	require.Equal(t, old.Seq, fresh.Seq, "the sequence is used again")

	_, err = rs.Get(ctx, "w", "op_old", "A", old.Seq)
	require.ErrorIs(t, err, results.ErrGone)
	require.NoError(t, rs.Erase(ctx, "w", "op_old", "A", old.Seq))
	_, err = rs.Get(ctx, "w", "op_new", "A", fresh.Seq)
	require.NoError(t, err, "the new op's result stays")
}

// A result kept on its attempt's own subject, as versions before
// result_seq kept it (a completed event without result_seq), is read and
// erased there.
func TestResultsKeptPerAttemptStillReadAndErase(t *testing.T) {
	rs, n := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Seal it as the store does, then put it where an earlier version did.
	k, err := rs.Keep(ctx, kept("w", "op_old", "A", `{"old":true}`))
	require.NoError(t, err)
	sealed, err := rs.Get(ctx, "w", "op_old", "A", k.Seq)
	require.NoError(t, err)
	require.NoError(t, rs.Erase(ctx, "w", "op_old", "A", k.Seq))
	m := &nats.Msg{Subject: events.AttemptResultSubject("w", "op_old", "A"), Data: sealed,
		Header: nats.Header{jetstream.MsgTTLHeader: {"1h"}}}
	_, err = n.JetStream.PublishMsg(ctx, m)
	require.NoError(t, err)

	got, err := rs.Get(ctx, "w", "op_old", "A", 0)
	require.NoError(t, err)
	plain, _, err := rs.Open("op_old", got)
	require.NoError(t, err)
	assert.Equal(t, `{"old":true}`, string(plain))
	require.NoError(t, rs.Erase(ctx, "w", "op_old", "A", 0))
	_, err = rs.Get(ctx, "w", "op_old", "A", 0)
	require.ErrorIs(t, err, results.ErrGone)
}

// A result not kept (a retention of zero) has no sequence.
func TestResultNotKeptHasNoSequence(t *testing.T) {
	rs, _ := newStore(t)
	k, err := rs.Keep(context.Background(), events.KeptResult{Workspace: "w", OpID: "op_1", Attempt: "A", Agent: "a1", Result: []byte(`{}`)})
	require.NoError(t, err)
	assert.Nil(t, k.Until)
	assert.Zero(t, k.Seq)
}
