package events_test

import (
	"encoding/json"
	"testing"

	"github.com/airlock-dev/airlock/events"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One decoder for every form a request is read in: binary mode with its
// headers, structured mode, and the body alone; the same rules refuse the
// same bad requests in each.
func TestDecodeRequestEveryForm(t *testing.T) {
	req := events.Request{Workspace: "w", Agent: "a", Tool: "echo", Args: json.RawMessage(`{"x":1}`)}
	body, err := events.MarshalJSON(req)
	require.NoError(t, err)
	fp, op := req.Identity()
	bin := events.NewMessage(events.RequestSubject("w", "a"), events.TypeRequested, "test", op, fp, body)
	ev, err := events.Decode(bin.Header, bin.Data)
	require.NoError(t, err)
	structured, err := json.Marshal(ev)
	require.NoError(t, err)

	for name, got := range map[string]func() (*events.Request, error){
		"binary":            func() (*events.Request, error) { return events.DecodeRequest(bin.Header, bin.Data) },
		"body alone":        func() (*events.Request, error) { return events.DecodeStoredRequestBody(bin.Data) },
		"structured, alone": func() (*events.Request, error) { return events.DecodeStoredRequestBody(structured) },
	} {
		r, err := got()
		require.NoError(t, err, name)
		assert.Equal(t, req.Fingerprint(), r.Fingerprint(), name)
	}

	bad := events.Request{Workspace: "W", Agent: "a", Tool: "echo", Args: json.RawMessage(`{}`)}
	badBody, _ := json.Marshal(bad)
	_, err = events.DecodeStoredRequestBody(badBody)
	assert.Equal(t, events.CodeInvalidName, events.CodeOf(err))
	// Published without CloudEvents headers, a body is no request, even
	// one that would be a stored request's body.
	_, err = events.DecodeRequest(nil, bin.Data)
	assert.ErrorContains(t, err, "not a CloudEvent: no ce-specversion header")
	msg := events.NewMessage(events.RequestSubject("w", "a"), events.TypeRequested, "test", op, fp, badBody)
	_, err = events.DecodeRequest(msg.Header, msg.Data)
	assert.Equal(t, events.CodeInvalidName, events.CodeOf(err))

	other := events.NewMessage(events.RequestSubject("w", "a"), events.TypeGranted, "test", op, fp, body)
	_, err = events.DecodeRequest(other.Header, other.Data)
	assert.Equal(t, events.CodeInvalidEvent, events.CodeOf(err))
	big := make([]byte, events.MaxRequestBytes+1)
	_, err = events.DecodeStoredRequestBody(big)
	assert.Equal(t, events.CodeRequestTooLarge, events.CodeOf(err))
}

func TestSplitRequestSubject(t *testing.T) {
	for subject, want := range map[string][3]string{
		"airlock.v1.req.w.a":   {"w", "a", "ok"},
		"airlock.v1.req.W.a":   {"W", "a", "ok"},
		"airlock.v1.req.w.a.b": {"", "", ""},
		"airlock.v1.req.w":     {"", "", ""},
		"airlock.v1.req..a":    {"", "", ""},
		"airlock.v1.op.w.a":    {"", "", ""},
	} {
		ws, agent, ok := events.SplitRequestSubject(subject)
		assert.Equal(t, want, [3]string{ws, agent, map[bool]string{true: "ok"}[ok]}, subject)
	}
	_, _, ok := events.RequestSubjectParts("airlock.v1.req.W.a")
	assert.False(t, ok, "names are checked")
}
