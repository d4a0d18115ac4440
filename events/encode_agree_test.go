package events_test

import (
	"os"
	"testing"

	"github.com/airlock-dev/airlock/events"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The two writers of the binary binding (Encode, and the hot path's
// NewMessage) write the same headers for the same event, and the two
// readers (Decode with DecodeData, and DecodeStored's short path for
// Airlock's own messages) read the same event from them: every type's
// example, as Encode and as NewMessage write it.
func TestEncodersAndDecodersAgree(t *testing.T) {
	for name, path := range exampleFiles(t) {
		body, err := os.ReadFile(path)
		require.NoError(t, err)
		ev, err := events.Decode(nats.Header{events.HeaderContentType: []string{events.ContentTypeStructured}}, body)
		require.NoError(t, err, name)

		general := events.Encode("airlock.v1.x", ev)
		hot := events.NewMessage("airlock.v1.x", events.Type(ev.Type()), ev.Source(), ev.Subject(), ev.ID(), ev.Data())
		for k, v := range general.Header {
			if k == events.HeaderPrefix+"time" {
				continue // NewMessage stamps its own time
			}
			assert.Equal(t, v, hot.Header[k], "%s: header %s", name, k)
		}
		assert.Len(t, hot.Header, len(general.Header), name)

		want, err := events.DecodeData(ev)
		require.NoError(t, err, name)
		for form, m := range map[string]*nats.Msg{"Encode": general, "NewMessage": hot} {
			typ, id, got, err := events.DecodeStored(m.Header, m.Data)
			require.NoError(t, err, "%s from %s", name, form)
			assert.Equal(t, events.Type(ev.Type()), typ, "%s from %s", name, form)
			assert.Equal(t, ev.ID(), id, "%s from %s", name, form)
			assert.Equal(t, want, got, "%s from %s", name, form)
			full, err := events.Decode(m.Header, m.Data)
			require.NoError(t, err, "%s from %s", name, form)
			data, err := events.DecodeData(full)
			require.NoError(t, err)
			assert.Equal(t, want, data, "%s from %s, the general reader", name, form)
		}
	}
}
