package oplog_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAppendIsCompareAndSwapOverTheWholeOp(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	ctx := context.Background()
	st, err := n.JetStream.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	op := oplog.Op{Workspace: "w", ID: "op_0123456789abcdef0123456789abcdef", Tool: "echo"}
	hdr := events.OpHeader{OpID: op.ID, Workspace: "w"}

	_, err = oplog.Last(ctx, st, "w", op.ID)
	assert.ErrorIs(t, err, oplog.ErrEmpty)

	decided := &events.Decided{OpHeader: hdr, Request: &events.Summary{Tool: "echo"}, PolicyHash: "p"}
	seq, err := testenv.Writer(t, n.JetStream).Append(ctx, st, op, 0, events.TypeDecided, "test", decided)
	require.NoError(t, err)

	// A second first event loses, whatever its verb.
	_, err = testenv.Writer(t, n.JetStream).Append(ctx, st, op, 0, events.TypeDenied, "test", &events.Denied{OpHeader: hdr, Request: &events.Summary{}, Code: events.CodeCapabilityDenied})
	assert.ErrorIs(t, err, oplog.ErrConflict)
	assert.True(t, oplog.IsConflict(err))

	// Ten racing claims on one expected sequence: exactly one wins.
	var wins, losses int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := testenv.Writer(t, n.JetStream).Append(ctx, st, op, seq, events.TypeClaimed, "test", &events.Claimed{OpHeader: hdr, Attempt: string(rune('a' + i))})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, oplog.ErrConflict):
				losses++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 1, wins)
	assert.Equal(t, 9, losses)

	last, err := oplog.Last(ctx, st, "w", op.ID)
	require.NoError(t, err)
	assert.Equal(t, events.TypeClaimed, last.Type)
	assert.Equal(t, events.OpEventSubject("w", op.ID, "echo", events.TypeClaimed), lastSubject(t, st, op.ID))
	assert.Greater(t, last.Seq, seq)

	// Another op is untouched by this one's sequence.
	other := oplog.Op{Workspace: "w", ID: "op_ffffffffffffffffffffffffffffffff", Tool: "echo"}
	_, err = testenv.Writer(t, n.JetStream).Append(ctx, st, other, 0, events.TypeDecided, "test", &events.Decided{OpHeader: events.OpHeader{OpID: other.ID, Workspace: "w"}, Request: &events.Summary{}})
	require.NoError(t, err)
}

func lastSubject(t *testing.T, st jetstream.Stream, op string) string {
	t.Helper()
	raw, err := st.GetLastMsgForSubject(context.Background(), events.OpFilter("w", op))
	require.NoError(t, err)
	return raw.Subject
}

// An append whose answer is not awaited (the caller's context ends first)
// is resolved by reading the op back: it landed once, and Wait says so.
func TestWaitResolvesUnknownOutcome(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	ctx := context.Background()
	st, err := n.JetStream.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	for i := range 20 {
		op := oplog.Op{Workspace: "w", ID: fmt.Sprintf("op_%032x", i), Tool: "echo"}
		p := testenv.Writer(t, n.JetStream).Start(op, 0, events.TypeDecided, "test",
			&events.Decided{OpHeader: events.OpHeader{OpID: op.ID, Workspace: "w"}, Request: &events.Summary{}})
		done, cancel := context.WithCancel(ctx)
		cancel()
		seq, err := p.Wait(done, st)
		require.NoError(t, err)
		last, err := oplog.Last(ctx, st, "w", op.ID)
		require.NoError(t, err)
		assert.Equal(t, seq, last.Seq)
		assert.Equal(t, events.TypeDecided, last.Type)
	}
	info, err := st.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(20), info.State.Msgs, "each append landed exactly once")
}

// Acknowledgements are matched to their appends whatever order they come
// back in, and nothing is left waiting: not after a batch, not after a
// caller gave up, not when the connection is closed.
func TestAppendsAreMatchedToTheirAcks(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	ctx := context.Background()
	st, err := n.JetStream.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	nc, err := nats.Connect(n.Server.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)

	const ops = 300
	w := testenv.Writer(t, js)
	pending := make([]*oplog.Pending, ops)
	for i := range ops {
		op := oplog.Op{Workspace: "w", ID: fmt.Sprintf("op_%032x", i), Tool: "echo"}
		pending[i] = w.Start(op, 0, events.TypeDecided, "test",
			&events.Decided{OpHeader: events.OpHeader{OpID: op.ID, Workspace: "w"}, Request: &events.Summary{}})
	}
	seen := map[uint64]bool{}
	for i := ops - 1; i >= 0; i-- { // waited for in reverse
		seq, err := pending[i].Wait(ctx, st)
		require.NoError(t, err)
		raw, err := st.GetMsg(ctx, seq)
		require.NoError(t, err)
		assert.Equal(t, events.OpEventSubject("w", fmt.Sprintf("op_%032x", i), "echo", events.TypeDecided), raw.Subject, "seq %d is the append's own", seq)
		assert.False(t, seen[seq])
		seen[seq] = true
	}
	assert.Zero(t, oplog.WaitingAcks(w))

	// A caller that gives up is forgotten; the append it resolves by
	// reading back lands once.
	op := oplog.Op{Workspace: "w", ID: fmt.Sprintf("op_%032x", ops), Tool: "echo"}
	p := w.Start(op, 0, events.TypeDecided, "test", &events.Decided{OpHeader: events.OpHeader{OpID: op.ID, Workspace: "w"}, Request: &events.Summary{}})
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = p.Wait(done, st)
	require.NoError(t, err)
	assert.Zero(t, oplog.WaitingAcks(w))

	// A closed connection fails the append at once, as not sent.
	nc.Close()
	op.ID = fmt.Sprintf("op_%032x", ops+1)
	_, err = w.Start(op, 0, events.TypeDecided, "test", &events.Decided{OpHeader: events.OpHeader{OpID: op.ID, Workspace: "w"}, Request: &events.Summary{}}).Wait(ctx, st)
	assert.ErrorIs(t, err, nats.ErrConnectionClosed)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(ops+1), info.State.Msgs)
}

// With no stream on the subject (JetStream answers no responders), the
// append fails as not stored rather than hanging.
func TestAppendWithoutStreamFails(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := n.JetStream.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	require.NoError(t, n.JetStream.DeleteStream(ctx, streams.Ops))
	op := oplog.Op{Workspace: "w", ID: fmt.Sprintf("op_%032x", 1), Tool: "echo"}
	_, err = testenv.Writer(t, n.JetStream).Start(op, 0, events.TypeDecided, "test", &events.Decided{OpHeader: events.OpHeader{OpID: op.ID, Workspace: "w"}, Request: &events.Summary{}}).Wait(ctx, st)
	require.Error(t, err)
	assert.NotErrorIs(t, err, oplog.ErrConflict)
	assert.ErrorIs(t, err, jetstream.ErrNoStreamResponse)
}
