package projector_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/consumers/projector"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scrubFixture publishes one request per op and folds each op into st up
// to the events given, as the projector would; it returns the request
// sequences by op id.
func scrubFixture(t *testing.T, n *testenv.NATS, st *store.Store, ops map[string][]string) map[string]uint64 {
	t.Helper()
	ctx := context.Background()
	seqs := map[string]uint64{}
	b := st.NewBatch()
	// Event sequences go on from the store's, as the stream's do.
	evSeq, err := st.Applied()
	require.NoError(t, err)
	for name, history := range ops {
		req := events.Request{Workspace: "w", Agent: "a", Tool: "echo", Args: json.RawMessage(fmt.Sprintf(`{"secret":"SECRET-%s"}`, name))}
		require.NoError(t, req.Validate())
		body, err := json.Marshal(req)
		require.NoError(t, err)
		ack, err := n.JetStream.PublishMsg(ctx, events.NewMessage(events.RequestSubject("w", "a"), events.TypeRequested, "test", "", req.FingerprintHex(), body))
		require.NoError(t, err)
		id := events.OpID(req.Fingerprint())
		seqs[id] = ack.Sequence
		hdr := events.OpHeader{OpID: id, Workspace: "w"}
		sum := &events.Summary{Fingerprint: req.FingerprintHex(), Agent: "a", Tool: "echo", ArgsDigest: events.ArgsDigest(req.Args), RequestSeq: ack.Sequence}
		op, err := b.Op(id, true)
		require.NoError(t, err)
		for _, ev := range history {
			var data any
			switch ev {
			case "decided":
				data = &events.Decided{OpHeader: hdr, Request: sum}
			case "held":
				data = &events.Held{OpHeader: hdr, Request: sum, HoldID: events.HoldID(id)}
			case "denied":
				data = &events.Denied{OpHeader: hdr, Request: sum, Code: events.CodePolicyDenied}
			case "claimed":
				data = &events.Claimed{OpHeader: hdr, Attempt: "a1"}
			case "completed":
				data = &events.Completed{OpHeader: hdr, Attempt: "a1", ResultDigest: "sha256:r", ResultBytes: 4}
			}
			evSeq++
			require.NoError(t, op.Apply(data, evSeq, time.Now()))
		}
	}
	b.SetApplied(evSeq)
	require.NoError(t, b.Commit(true))
	return seqs
}

func requestsStream(t *testing.T, n *testenv.NATS) jetstream.Stream {
	t.Helper()
	st, err := n.JetStream.Stream(context.Background(), streams.Requests)
	require.NoError(t, err)
	return st
}

func gone(t *testing.T, st jetstream.Stream, seq uint64) bool {
	t.Helper()
	_, err := st.GetMsg(context.Background(), seq)
	if err == nil {
		return false
	}
	require.ErrorIs(t, err, jetstream.ErrMsgNotFound)
	return true
}

// A terminal op's request is erased and its index entry dropped; the
// requests of ops that are not terminal stay, whatever their state.
func TestScrubberErasesTerminalOpsRequestsOnly(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	st, err := store.Open(t.TempDir())
	require.NoError(t, err)
	defer st.Close()
	seqs := scrubFixture(t, n, st, map[string][]string{
		"completed": {"decided", "claimed", "completed"},
		"denied":    {"denied"},
		"ready":     {"decided"},
		"executing": {"decided", "claimed"},
		"held":      {"held"},
	})
	s, err := projector.NewScrubber(projector.ScrubberConfig{JetStream: n.JetStream, Store: st})
	require.NoError(t, err)
	reqs := requestsStream(t, n)
	erased, err := s.Sweep(context.Background(), reqs)
	require.NoError(t, err)
	assert.Equal(t, 2, erased)
	assert.Equal(t, uint64(2), s.Erased())
	for id, seq := range seqs {
		op, err := st.Op(id)
		require.NoError(t, err)
		assert.Equal(t, op.State.Terminal(), gone(t, reqs, seq), "op %s", op.State)
	}
	pending, err := st.PendingScrubs(nil, 10)
	require.NoError(t, err)
	assert.Empty(t, pending)

	// A sweep with nothing to do does nothing.
	erased, err = s.Sweep(context.Background(), reqs)
	require.NoError(t, err)
	assert.Zero(t, erased)
}

// A crash after the erasure and before the index entry went leaves the
// entry: the next scrubber, after a restart, erases again (the message is
// gone: that counts as done) and drops it. One that crashed before erasing
// erases then.
func TestScrubberFinishesAfterRestart(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	dir := t.TempDir()
	st, err := store.Open(dir)
	require.NoError(t, err)
	seqs := scrubFixture(t, n, st, map[string][]string{
		"erased-before-crash": {"denied"},
		"not-erased-yet":      {"decided", "claimed", "completed"},
	})
	reqs := requestsStream(t, n)
	var first uint64
	for id, seq := range seqs {
		if op, _ := st.Op(id); op.State == events.StateDenied {
			first = seq
			require.NoError(t, reqs.SecureDeleteMsg(context.Background(), seq)) // and then the crash
		}
	}
	require.NoError(t, st.Close())

	st, err = store.Open(dir)
	require.NoError(t, err)
	defer st.Close()
	pending, err := st.PendingScrubs(nil, 10)
	require.NoError(t, err)
	require.Len(t, pending, 2, "both entries survived the crash")
	s, err := projector.NewScrubber(projector.ScrubberConfig{JetStream: n.JetStream, Store: st, Interval: 10 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	require.Eventually(t, func() bool {
		p, err := st.PendingScrubs(nil, 10)
		return err == nil && len(p) == 0
	}, 10*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	for _, seq := range seqs {
		assert.True(t, gone(t, reqs, seq), "request %d", seq)
	}
	assert.True(t, gone(t, reqs, first))
	assert.Equal(t, uint64(2), s.Erased())
}

// A stream that refuses deletes keeps the entry, for the next sweep.
func TestScrubberKeepsWhatItCannotErase(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	ctx := context.Background()
	cfg := streams.RequestsConfig(streams.Config{})
	cfg.DenyDelete = true
	_, err := n.JetStream.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	st, err := store.Open(t.TempDir())
	require.NoError(t, err)
	defer st.Close()
	seqs := scrubFixture(t, n, st, map[string][]string{"denied": {"denied"}})
	s, err := projector.NewScrubber(projector.ScrubberConfig{JetStream: n.JetStream, Store: st})
	require.NoError(t, err)
	reqs := requestsStream(t, n)
	erased, err := s.Sweep(ctx, reqs)
	require.Error(t, err)
	assert.Zero(t, erased)
	for _, seq := range seqs {
		assert.False(t, gone(t, reqs, seq))
	}
	pending, err := st.PendingScrubs(nil, 10)
	require.NoError(t, err)
	assert.Len(t, pending, 1, "left for a later sweep")
}

// Above the secure backlog a sweep deletes rather than erases: the
// requests are gone from the stream all the same, and only the terminal
// ops' requests.
func TestScrubberDeletesUnderLoad(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	st, err := store.Open(t.TempDir())
	require.NoError(t, err)
	defer st.Close()
	ops := map[string][]string{"held": {"held"}}
	for i := range 5 {
		ops[fmt.Sprint("done", i)] = []string{"decided", "claimed", "completed"}
	}
	seqs := scrubFixture(t, n, st, ops)
	s, err := projector.NewScrubber(projector.ScrubberConfig{JetStream: n.JetStream, Store: st, SecureBacklog: 2})
	require.NoError(t, err)
	reqs := requestsStream(t, n)
	erased, err := s.Sweep(context.Background(), reqs)
	require.NoError(t, err)
	assert.Equal(t, 5, erased)
	assert.Equal(t, uint64(5), s.Deleted(), "deleted, not erased one by one")
	for id, seq := range seqs {
		op, err := st.Op(id)
		require.NoError(t, err)
		assert.Equal(t, op.State.Terminal(), gone(t, reqs, seq), "op %s", op.State)
	}

	// At or below the backlog, each is erased securely.
	seqs = scrubFixture(t, n, st, map[string][]string{"late": {"denied"}})
	erased, err = s.Sweep(context.Background(), reqs)
	require.NoError(t, err)
	assert.Equal(t, 1, erased)
	assert.Equal(t, uint64(5), s.Deleted())
	for _, seq := range seqs {
		assert.True(t, gone(t, reqs, seq))
	}
}

// orderedFixture publishes one request per history, in order, and folds
// each op into st as scrubFixture does; it returns the ops' ids and their
// requests' sequences, in the same order.
func orderedFixture(t *testing.T, n *testenv.NATS, st *store.Store, histories [][]string) (ids []string, seqs []uint64) {
	t.Helper()
	for i, h := range histories {
		m := scrubFixture(t, n, st, map[string][]string{fmt.Sprint("op", i): h})
		for id, seq := range m {
			ids, seqs = append(ids, id), append(seqs, seq)
		}
	}
	return ids, seqs
}

// settleAsGate acknowledges, through the gate's durable consumer, every
// request up to and including seq, as the gate does once each op's first
// event is stored.
func settleAsGate(t *testing.T, n *testenv.NATS, upTo uint64) {
	t.Helper()
	ctx := context.Background()
	cons, err := n.JetStream.CreateOrUpdateConsumer(ctx, streams.Requests, jetstream.ConsumerConfig{
		Durable: streams.GateConsumer, AckPolicy: jetstream.AckExplicitPolicy,
	})
	require.NoError(t, err)
	batch, err := cons.Fetch(int(upTo), jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	for m := range batch.Messages() {
		md, err := m.Metadata()
		require.NoError(t, err)
		if md.Sequence.Stream <= upTo {
			require.NoError(t, m.DoubleAck(ctx))
		}
	}
	require.NoError(t, batch.Error())
}

// A backlog is erased with one purge below the lowest request still
// needed (the oldest live op's, or the first the gate has not settled),
// and the ended ops above it one by one; nothing still needed goes.
func TestScrubberPurgesBelowTheLowestRequestNeeded(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	st, err := store.Open(t.TempDir())
	require.NoError(t, err)
	defer st.Close()
	var histories [][]string
	for i := range 60 {
		switch {
		case i == 40:
			histories = append(histories, []string{"decided"}) // live: an executor reads it
		case i == 45:
			histories = append(histories, []string{"held"}) // moved to AIRLOCK_HELD
		case i%3 == 0:
			histories = append(histories, []string{"denied"})
		default:
			histories = append(histories, []string{"decided", "claimed", "completed"})
		}
	}
	ids, seqs := orderedFixture(t, n, st, histories)
	// One more request the gate has not settled: no op yet.
	undecided := scrubFixture(t, n, st, map[string][]string{"undecided": nil})
	settleAsGate(t, n, seqs[len(seqs)-1])

	s, err := projector.NewScrubber(projector.ScrubberConfig{JetStream: n.JetStream, Store: st})
	require.NoError(t, err)
	reqs := requestsStream(t, n)
	erased, err := s.Sweep(context.Background(), reqs)
	require.NoError(t, err)
	assert.Equal(t, 40, erased, "the ended ops below the live one, with one purge")
	assert.Equal(t, uint64(1), s.Purges())
	info, err := reqs.Info(context.Background())
	require.NoError(t, err)
	assert.Equal(t, seqs[40], info.State.FirstSeq, "purged below the live op's request")
	for i := 41; i < 60; i++ {
		assert.False(t, gone(t, reqs, seqs[i]), "op %d: above the floor, its op ended a moment ago: left for a later purge", i)
	}
	pending, err := st.PendingScrubs(nil, 100)
	require.NoError(t, err)
	assert.Len(t, pending, 18)

	// Past the grace, the live op still holding the floor down, they are
	// deleted one by one.
	s, err = projector.NewScrubber(projector.ScrubberConfig{JetStream: n.JetStream, Store: st, PurgeGrace: time.Nanosecond})
	require.NoError(t, err)
	erased, err = s.Sweep(context.Background(), reqs)
	require.NoError(t, err)
	assert.Equal(t, 18, erased)
	for i, id := range ids {
		op, err := st.Op(id)
		require.NoError(t, err)
		if op.State == events.StateHeld {
			continue // its request would have been moved by the gate
		}
		assert.Equal(t, op.State.Terminal(), gone(t, reqs, seqs[i]), "op %d %s", i, op.State)
	}
	for _, seq := range undecided {
		assert.False(t, gone(t, reqs, seq), "a request the gate has not settled stays")
	}
	pending, err = st.PendingScrubs(nil, 100)
	require.NoError(t, err)
	assert.Empty(t, pending)
}

// A requests stream made by an earlier version denies purges, and
// JetStream never lets it allow them again: its scrubber deletes every
// request on its own.
func TestScrubberDeletesOneByOneWhenTheStreamDeniesPurges(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	ctx := context.Background()
	reqs := requestsStream(t, n)
	cfg := reqs.CachedInfo().Config
	cfg.DenyPurge = true
	_, err := n.JetStream.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	st, err := store.Open(t.TempDir())
	require.NoError(t, err)
	defer st.Close()
	var histories [][]string
	for range 30 {
		histories = append(histories, []string{"decided", "claimed", "completed"})
	}
	_, seqs := orderedFixture(t, n, st, histories)
	settleAsGate(t, n, seqs[len(seqs)-1])
	s, err := projector.NewScrubber(projector.ScrubberConfig{JetStream: n.JetStream, Store: st})
	require.NoError(t, err)
	reqs = requestsStream(t, n)
	erased, err := s.Sweep(ctx, reqs)
	require.NoError(t, err)
	assert.Equal(t, 30, erased)
	assert.Zero(t, s.Purges())
	for _, seq := range seqs {
		assert.True(t, gone(t, reqs, seq))
	}
}

// The gate's move of a held op's request can land after the op ended and
// its copy was looked for (a move held up by an election, or by an erase
// holding AIRLOCK_HELD): the scrubber's next CheckHeld, HeldCheckEvery
// later, erases the copy that came late.
func TestScrubberErasesAHeldCopyThatCameLate(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	st, err := store.Open(t.TempDir())
	require.NoError(t, err)
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	seqs := scrubFixture(t, n, st, map[string][]string{"late": {"held", "denied"}})
	const every = 300 * time.Millisecond
	s, err := projector.NewScrubber(projector.ScrubberConfig{JetStream: n.JetStream, Store: st, Interval: 20 * time.Millisecond, HeldCheckEvery: every})
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	defer func() {
		stop()
		require.NoError(t, <-done)
	}()
	var id string
	for op := range seqs {
		id = op
	}
	reqs := requestsStream(t, n)
	require.Eventually(t, func() bool { return gone(t, reqs, seqs[id]) },
		10*time.Second, 10*time.Millisecond, "the ended op is scrubbed, its copy not yet stored")

	held, err := n.JetStream.Stream(ctx, streams.Held)
	require.NoError(t, err)
	landed := time.Now()
	_, err = n.JetStream.Publish(ctx, events.HeldSubject(id), []byte(`{"secret":"SECRET-late"}`))
	require.NoError(t, err, "the move lands late")
	require.Eventually(t, func() bool {
		_, err := held.GetLastMsgForSubject(ctx, events.HeldSubject(id))
		return errors.Is(err, jetstream.ErrMsgNotFound)
	}, 10*time.Second, 10*time.Millisecond, "the late copy is erased")
	assert.Less(t, time.Since(landed), 2*every+time.Second, "by the next check or the one after")
}

// A copy whose late move the process would have looked for again, had
// it not stopped, is erased by the next scrubber when it starts: CheckHeld
// erases the copies of ended ops and leaves those of ops still held.
func TestScrubberErasesHeldCopiesOfEndedOpsWhenItStarts(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	st, err := store.Open(t.TempDir())
	require.NoError(t, err)
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	seqs := scrubFixture(t, n, st, map[string][]string{"ended": {"held", "denied"}, "waiting": {"held"}})
	ended := opNamed(t, seqs, st, events.StateDenied)
	waiting := opNamed(t, seqs, st, events.StateHeld)

	// The first process scrubs the ended op before its copy lands, and
	// stops before it looks again. (Its start indexed the store: the
	// second's start indexes nothing again.)
	_, err = st.IndexScrubs(ctx)
	require.NoError(t, err)
	first, err := projector.NewScrubber(projector.ScrubberConfig{JetStream: n.JetStream, Store: st})
	require.NoError(t, err)
	erased, err := first.Sweep(ctx, requestsStream(t, n))
	require.NoError(t, err)
	require.Equal(t, 1, erased)
	held, err := n.JetStream.Stream(ctx, streams.Held)
	require.NoError(t, err)
	for _, op := range []string{ended, waiting} {
		_, err = n.JetStream.Publish(ctx, events.HeldSubject(op), []byte(`{"secret":"SECRET-`+op+`"}`))
		require.NoError(t, err)
	}
	// An op the projection has not seen yet keeps its copy too.
	_, err = n.JetStream.Publish(ctx, events.HeldSubject("op_unknown"), []byte(`{"secret":"SECRET-unknown"}`))
	require.NoError(t, err)

	second, err := projector.NewScrubber(projector.ScrubberConfig{JetStream: n.JetStream, Store: st, Interval: 20 * time.Millisecond})
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- second.Run(rctx) }()
	require.Eventually(t, func() bool {
		_, err := held.GetLastMsgForSubject(ctx, events.HeldSubject(ended))
		return errors.Is(err, jetstream.ErrMsgNotFound)
	}, 10*time.Second, 20*time.Millisecond, "the ended op's copy is erased when the scrubber starts")
	stop()
	require.NoError(t, <-done)
	for _, op := range []string{waiting, "op_unknown"} {
		_, err = held.GetLastMsgForSubject(ctx, events.HeldSubject(op))
		assert.NoError(t, err, "the copy of %s stays", op)
	}
	n2, err := second.CheckHeld(ctx)
	require.NoError(t, err)
	assert.Zero(t, n2, "nothing more to erase")
}

// opNamed is the op of seqs the store has in state.
func opNamed(t *testing.T, seqs map[string]uint64, st *store.Store, state events.State) string {
	t.Helper()
	for id := range seqs {
		op, err := st.Op(id)
		require.NoError(t, err)
		if op.State == state {
			return id
		}
	}
	t.Fatalf("no op in state %s", state)
	return ""
}
