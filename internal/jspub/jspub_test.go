package jspub

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/natsrv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseAck(t *testing.T) {
	for _, tc := range []struct {
		name string
		data string
		seq  uint64
		dup  bool
		code jetstream.ErrorCode // 0: no API error
		err  error
	}{
		{name: "stored", data: `{"stream":"AIRLOCK_OPS","seq":42}`, seq: 42},
		{name: "domain", data: `{"stream":"AIRLOCK_OPS","seq":7,"domain":"hub"}`, seq: 7},
		{name: "duplicate", data: `{"stream":"AIRLOCK_REQUESTS","seq":3,"duplicate":true}`, seq: 3, dup: true},
		{name: "spaced", data: `{ "stream": "AIRLOCK_OPS", "seq": 9 }`, seq: 9},
		{name: "reordered", data: `{"seq":11,"stream":"AIRLOCK_OPS"}`, seq: 11},
		{name: "wrong last sequence", data: `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"},"stream":"AIRLOCK_OPS","seq":0}`, code: jetstream.JSErrCodeStreamWrongLastSequence},
		{name: "error after seq", data: `{"stream":"AIRLOCK_OPS","seq":5,"error":{"code":503,"err_code":10077,"description":"resource limits exceeded"}}`, code: 10077},
		{name: "no stream", data: `{"seq":5}`, err: jetstream.ErrInvalidJSAck},
		{name: "not JSON", data: `{"stream":"AIRLOCK_OPS","seq":5`, err: jetstream.ErrInvalidJSAck},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seq, dup, err := parseAck(&nats.Msg{Data: []byte(tc.data)})
			switch {
			case tc.code != 0:
				var apiErr *jetstream.APIError
				require.ErrorAs(t, err, &apiErr)
				assert.Equal(t, tc.code, apiErr.ErrorCode)
			case tc.err != nil:
				assert.ErrorIs(t, err, tc.err)
			default:
				require.NoError(t, err)
				assert.Equal(t, tc.seq, seq)
				assert.Equal(t, tc.dup, dup)
			}
		})
	}
	_, _, err := parseAck(&nats.Msg{Header: nats.Header{"Status": []string{"503"}}})
	assert.ErrorIs(t, err, jetstream.ErrNoStreamResponse)
	_, _, err = parseAck(&nats.Msg{})
	assert.ErrorIs(t, err, jetstream.ErrInvalidJSAck)
}

// Whatever the fast path accepts, encoding/json reads the same way: a
// stored message's sequence and no error.
func FuzzFastAck(f *testing.F) {
	for _, s := range []string{
		`{"stream":"AIRLOCK_OPS","seq":42}`, `{"stream":"A","seq":1,"duplicate":true}`,
		`{"stream":"A\"B","seq":1}`, `{"stream":"A","seq":18446744073709551615}`,
		`{"stream":"A","seq":1,"error":{"code":1}}`, `{"stream":"A","seq":01}`, `{"stream":"A","seq":1}x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		seq, ok := fastAck(b)
		if !ok {
			return
		}
		var r struct {
			Error  *jetstream.APIError `json:"error"`
			Stream string              `json:"stream"`
			Seq    uint64              `json:"seq"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("fast path read %q as seq %d; encoding/json refuses it: %v", b, seq, err)
		}
		if r.Error != nil || r.Stream == "" || r.Seq != seq {
			t.Fatalf("fast path read %q as seq %d; encoding/json reads %+v", b, seq, r)
		}
	})
}

// An acknowledgement lost with the connection fails the wait with
// nats.ErrDisconnected as soon as the client starts reconnecting, and one
// waiting when the connection closes with nats.ErrConnectionClosed.
func TestAcksFailWhenTheConnectionDrops(t *testing.T) {
	s, err := natsrv.Start(natsrv.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:-1"})
	require.NoError(t, err)
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	silent, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	defer silent.Close()
	// Something takes the subject and never answers: no 503, no ack.
	_, err = silent.Subscribe("test.silent", func(*nats.Msg) {})
	require.NoError(t, err)
	require.NoError(t, silent.Flush())

	nc, err := nats.Connect(s.ClientURL(), nats.ReconnectWait(10*time.Millisecond))
	require.NoError(t, err)
	defer nc.Close()
	p, err := New(nc)
	require.NoError(t, err)
	ack, err := p.Publish(nats.NewMsg("test.silent"))
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	id, err := nc.GetClientID()
	require.NoError(t, err)
	require.NoError(t, s.DisconnectClientByID(id))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err = ack.Wait(ctx)
	assert.ErrorIs(t, err, nats.ErrDisconnected)
	assert.Zero(t, p.Waiting())

	// Back, and then closed with an ack waiting.
	require.Eventually(t, nc.IsConnected, 10*time.Second, 10*time.Millisecond)
	ack, err = p.Publish(nats.NewMsg("test.silent"))
	require.NoError(t, err)
	nc.Close()
	_, _, err = ack.Wait(ctx)
	assert.ErrorIs(t, err, nats.ErrConnectionClosed)
	assert.Zero(t, p.Waiting())
}

// WaitAtMost returns an acknowledgement that came, gives up with
// context.DeadlineExceeded when its bound passes first (forgetting the
// ack), and with the context's own error when the context ends first.
func TestWaitAtMost(t *testing.T) {
	s, err := natsrv.Start(natsrv.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:-1"})
	require.NoError(t, err)
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	// One subject answers as JetStream would, one never answers.
	_, err = nc.Subscribe("test.answers", func(m *nats.Msg) { _ = m.Respond([]byte(`{"stream":"S","seq":7}`)) })
	require.NoError(t, err)
	_, err = nc.Subscribe("test.silent", func(*nats.Msg) {})
	require.NoError(t, err)
	p, err := New(nc)
	require.NoError(t, err)

	ack, err := p.Publish(nats.NewMsg("test.answers"))
	require.NoError(t, err)
	seq, dup, err := ack.WaitAtMost(t.Context(), 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, uint64(7), seq)
	assert.False(t, dup)
	// Already in: answered again at once, without waiting.
	seq, _, err = ack.WaitAtMost(t.Context(), 0)
	require.NoError(t, err)
	assert.Equal(t, uint64(7), seq)

	ack, err = p.Publish(nats.NewMsg("test.silent"))
	require.NoError(t, err)
	start := time.Now()
	_, _, err = ack.WaitAtMost(t.Context(), 50*time.Millisecond)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	assert.Zero(t, p.Waiting())

	ack, err = p.Publish(nats.NewMsg("test.silent"))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, _, err = ack.WaitAtMost(ctx, time.Minute)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, p.Waiting())
}
