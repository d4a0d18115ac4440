package events_test

import (
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	natsjs "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The NATS binary-mode binding, ours against the CloudEvents SDK's own
// (protocol/nats_jetstream), both ways, on events whose attributes need
// no percent-encoding (where the two must agree: the SDK does not
// percent-encode header values, Airlock does).
func TestBindingAgreesWithTheSDK(t *testing.T) {
	ctx := context.Background()
	data, _ := json.Marshal(map[string]any{"op_id": "op_0123456789abcdef0123456789abcdef", "workspace": "w"})
	for _, name := range []string{"plain", "with extension"} {
		ev := event.New()
		ev.SetType(string(events.TypeDecided))
		ev.SetSource("airlock/gate")
		ev.SetID("Tm6GpR1xWc9ZsK4dJq8nLf")
		ev.SetSubject("op_0123456789abcdef0123456789abcdef")
		ev.SetTime(time.Date(2026, 12, 1, 18, 0, 0, 123456789, time.UTC))
		require.NoError(t, ev.SetData(events.ContentTypeJSON, data))
		if name == "with extension" {
			ev.SetExtension("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
		}

		// Ours written, the SDK's read. The one difference: Airlock
		// writes the data's content type as Content-Type, which the SDK
		// looks for only as content-type or ce-datacontenttype; JSON is
		// what both take without one.
		msg := events.Encode("airlock.v1.op.w.x.echo.decided", ev)
		got, err := binding.ToEvent(ctx, natsjs.NewMessage(msg))
		require.NoError(t, err, name)
		assert.Empty(t, got.DataContentType(), "the SDK still misses Content-Type: if it reads it now, drop this line")
		require.NoError(t, got.SetData(events.ContentTypeJSON, got.Data()))
		same(t, ev, *got, name+": ours to the SDK's")

		// The hot path's message reads the same.
		if name == "plain" {
			hot := events.NewMessage("airlock.v1.op.w.x.echo.decided", events.TypeDecided, ev.Source(), ev.Subject(), ev.ID(), data)
			fast, err := binding.ToEvent(ctx, natsjs.NewMessage(hot))
			require.NoError(t, err)
			assert.Equal(t, ev.Type(), fast.Type())
			assert.Equal(t, ev.ID(), fast.ID())
			assert.Equal(t, ev.Subject(), fast.Subject())
			assert.JSONEq(t, string(data), string(fast.Data()))
		}

		// The SDK's written, ours read.
		out := &natsMsgWriter{}
		h, err := natsjs.WriteMsg(ctx, binding.ToMessage(&ev), out)
		require.NoError(t, err, name)
		back, err := events.Decode(h, out.data)
		require.NoError(t, err, "%s: %v", name, h)
		same(t, ev, back, name+": the SDK's to ours")
	}
}

func same(t *testing.T, want, got event.Event, what string) {
	t.Helper()
	assert.Equal(t, want.Type(), got.Type(), what)
	assert.Equal(t, want.Source(), got.Source(), what)
	assert.Equal(t, want.ID(), got.ID(), what)
	assert.Equal(t, want.Subject(), got.Subject(), what)
	assert.True(t, want.Time().Equal(got.Time()), "%s: time %s, want %s", what, got.Time(), want.Time())
	assert.Equal(t, want.DataContentType(), got.DataContentType(), what)
	assert.JSONEq(t, string(want.Data()), string(got.Data()), what)
	assert.Equal(t, want.Extensions(), got.Extensions(), what)
}

// natsMsgWriter takes the body the SDK's writer hands over.
type natsMsgWriter struct{ data []byte }

func (w *natsMsgWriter) ReadFrom(r io.Reader) (int64, error) {
	b, err := io.ReadAll(r)
	w.data = b
	return int64(len(b)), err
}
