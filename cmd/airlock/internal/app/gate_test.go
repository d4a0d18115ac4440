package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/apptest"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func binaryRequest(t *testing.T, subject string, body []byte, mutate func(nats.Header)) *nats.Msg {
	t.Helper()
	ev, err := events.NewEventRaw(events.TypeRequested, "test", "", "id-1", []byte(`{}`))
	require.NoError(t, err)
	m := events.Encode(subject, ev)
	m.Data = body
	if mutate != nil {
		mutate(m.Header)
	}
	return m
}

// TestBadInputIsRejected publishes each kind of bad input as plain NATS and
// checks the stable code in the reply and in a request.rejected event, and
// that an op accepted before is untouched and the pipeline keeps running.
func TestBadInputIsRejected(t *testing.T) {
	a := apptest.StartApp(t, app.Config{})
	c, nc := apptest.Client(t, a.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	good := events.Request{Workspace: "ws", Agent: "ag", Tool: "echo", Args: json.RawMessage(`{"keep":true}`)}
	before, err := c.Submit(ctx, good)
	require.NoError(t, err)
	require.Equal(t, events.StateCompleted, before.State)
	var opBefore *events.Op
	require.Eventually(t, func() bool { // the projector folds completed after the reply
		opBefore, err = c.Op(ctx, before.OpID)
		return err == nil && opBefore.State == events.StateCompleted
	}, 10*time.Second, 10*time.Millisecond)

	valid := func(r events.Request) []byte {
		b, err := json.Marshal(r)
		require.NoError(t, err)
		return b
	}
	huge := bytes.Repeat([]byte("x"), events.MaxRequestBytes)
	bigArgs := `{"a":"` + strings.Repeat("y", events.MaxArgsBytes) + `"}`
	cases := []struct {
		name    string
		subject string
		msg     func(subject string) *nats.Msg
		code    events.Code
	}{
		{"not a CloudEvent", "ws.ag", func(s string) *nats.Msg {
			m := nats.NewMsg(s)
			m.Data = []byte(`{"workspace":"ws"}`)
			return m
		}, events.CodeInvalidEvent},
		{"malformed structured CloudEvent", "ws.ag", func(s string) *nats.Msg {
			m := nats.NewMsg(s)
			m.Header.Set("Content-Type", "application/cloudevents+json")
			m.Data = []byte(`{"specversion":"1.0","type":`)
			return m
		}, events.CodeInvalidEvent},
		{"binary event without id", "ws.ag", func(s string) *nats.Msg {
			return binaryRequest(t, s, valid(good), func(h nats.Header) { h.Del("ce-id") })
		}, events.CodeInvalidEvent},
		{"unknown event type", "ws.ag", func(s string) *nats.Msg {
			return binaryRequest(t, s, valid(good), func(h nats.Header) { h.Set("ce-type", "dev.airlock.tool.exploded.v1") })
		}, events.CodeUnknownEventType},
		{"op event on a request subject", "ws.ag", func(s string) *nats.Msg {
			return binaryRequest(t, s, valid(good), func(h nats.Header) { h.Set("ce-type", string(events.TypeCompleted)) })
		}, events.CodeInvalidEvent},
		{"oversized body", "ws.ag", func(s string) *nats.Msg {
			return binaryRequest(t, s, append([]byte(`{"pad":"`), append(huge, '"', '}')...), nil)
		}, events.CodeRequestTooLarge},
		{"oversized args", "ws.ag", func(s string) *nats.Msg {
			return binaryRequest(t, s, []byte(`{"workspace":"ws","agent":"ag","tool":"echo","args":`+bigArgs+`}`), nil)
		}, events.CodeArgsTooLarge},
		{"invalid workspace name", "ws.ag", func(s string) *nats.Msg {
			return binaryRequest(t, s, []byte(`{"workspace":"WS!","agent":"ag","tool":"echo","args":{}}`), nil)
		}, events.CodeInvalidName},
		{"invalid subject workspace", "Bad.ag", func(s string) *nats.Msg {
			return binaryRequest(t, s, valid(good), nil)
		}, events.CodeSubjectMismatch},
		{"invalid tool name", "ws.ag", func(s string) *nats.Msg {
			return binaryRequest(t, s, []byte(`{"workspace":"ws","agent":"ag","tool":"-x","args":{}}`), nil)
		}, events.CodeInvalidName},
		{"non-JSON args", "ws.ag", func(s string) *nats.Msg {
			return binaryRequest(t, s, []byte(`{"workspace":"ws","agent":"ag","tool":"echo","args":"a" "b"}`), nil)
		}, events.CodeInvalidEvent},
		{"args that are not canonicalisable", "ws.ag", func(s string) *nats.Msg {
			return binaryRequest(t, s, []byte(`{"workspace":"ws","agent":"ag","tool":"echo","args":{"n":12345678901234567890}}`), nil)
		}, events.CodeInvalidArgs},
		{"missing args", "ws.ag", func(s string) *nats.Msg {
			return binaryRequest(t, s, []byte(`{"workspace":"ws","agent":"ag","tool":"echo"}`), nil)
		}, events.CodeInvalidArgs},
		{"body workspace differs from subject", "other.ag", func(s string) *nats.Msg {
			return binaryRequest(t, s, valid(good), nil)
		}, events.CodeSubjectMismatch},
		{"body agent differs from subject", "ws.intruder", func(s string) *nats.Msg {
			return binaryRequest(t, s, valid(good), nil)
		}, events.CodeSubjectMismatch},
		{"bad idempotency key", "ws.ag", func(s string) *nats.Msg {
			return binaryRequest(t, s, []byte(`{"workspace":"ws","agent":"ag","tool":"echo","args":{},"idempotency_key":"has space"}`), nil)
		}, events.CodeInvalidIdempotencyKey},
	}
	rejected, err := nc.SubscribeSync(events.RejectedSubjects)
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	reqs, err := a.JetStream.Stream(ctx, streams.Requests)
	require.NoError(t, err)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			subject := events.SubjectRoot + ".req." + tc.subject
			parts := strings.Split(subject, ".")
			inbox := events.ReplyPrefix(parts[len(parts)-1]) + nats.NewInbox()[len("_INBOX."):]
			sub, err := nc.SubscribeSync(inbox)
			require.NoError(t, err)
			defer sub.Unsubscribe()
			require.NoError(t, nc.Flush()) // the server knows the inbox before the gate answers
			m := tc.msg(subject)
			m.Header.Set(events.HeaderReplyTo, inbox)
			_, err = a.JetStream.PublishMsg(ctx, m)
			require.NoError(t, err)

			resp, err := sub.NextMsg(10 * time.Second)
			require.NoError(t, err)
			var r events.Reply
			require.NoError(t, json.Unmarshal(resp.Data, &r))
			assert.Equal(t, tc.code, r.Code, r.Message)
			assert.Empty(t, r.OpID)

			ev, err := rejected.NextMsg(10 * time.Second)
			require.NoError(t, err)
			assert.Equal(t, string(events.TypeRejected), ev.Header.Get("ce-type"))
			decoded, err := events.Decode(ev.Header, ev.Data)
			require.NoError(t, err)
			data, err := events.DecodeData(decoded)
			require.NoError(t, err)
			rej := data.(*events.Rejected)
			assert.Equal(t, tc.code, rej.Code)
			assert.Equal(t, events.Digest(m.Data), rej.Digest)
			assert.Equal(t, len(m.Data), rej.Size)
			// The rejection keeps the body's digest and size; the body,
			// which may hold args, is erased.
			require.Eventually(t, func() bool {
				_, err := reqs.GetMsg(ctx, rej.RequestSeq)
				return errors.Is(err, jetstream.ErrMsgNotFound)
			}, 10*time.Second, 10*time.Millisecond)
		})
	}

	// A subject without the agent token is rejected too, unanswered (there
	// is no agent to answer), on the rejection subject of no workspace.
	_, err = a.JetStream.PublishMsg(ctx, binaryRequest(t, events.SubjectRoot+".req.ws", valid(good), nil))
	require.NoError(t, err)
	ev, err := rejected.NextMsg(10 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, events.RejectedSubject(events.NoWorkspace), ev.Subject)
	assert.Contains(t, string(ev.Data), string(events.CodeSubjectMismatch))

	// The op accepted before is unchanged, and the pipeline still runs.
	opAfter, err := c.Op(ctx, before.OpID)
	require.NoError(t, err)
	assert.Equal(t, opBefore, opAfter)
	after, err := c.Submit(ctx, events.Request{Workspace: "ws", Agent: "ag", Tool: "echo", Args: json.RawMessage(`{"still":"running"}`)})
	require.NoError(t, err)
	assert.Equal(t, events.StateCompleted, after.State)

	// Every rejected request is settled: the gate holds nothing back.
	waitSettled(t, a.JetStream, streams.Requests, streams.GateConsumer)
}

func TestDeniedByPolicy(t *testing.T) {
	a := apptest.StartApp(t, app.Config{Policy: policyLocked()})
	c, _ := apptest.Client(t, a.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// An unknown tool is destructive and never runs.
	out, err := c.Submit(ctx, events.Request{Workspace: "open", Agent: "ag", Tool: "rm_rf", Args: json.RawMessage(`{}`)})
	require.NoError(t, err)
	assert.Equal(t, events.StateDenied, out.State)
	assert.Equal(t, events.CodeCapabilityDenied, out.Code)
	// A locked workspace runs read tools only: echo is read.
	out, err = c.Submit(ctx, events.Request{Workspace: "vault", Agent: "ag", Tool: "echo", Args: json.RawMessage(`{}`)})
	require.NoError(t, err)
	assert.Equal(t, events.StateCompleted, out.State)
	out, err = c.Submit(ctx, events.Request{Workspace: "vault", Agent: "ag", Tool: "writer", Args: json.RawMessage(`{}`)})
	require.NoError(t, err)
	assert.Equal(t, events.StateDenied, out.State)
	assert.Equal(t, events.CodeWorkspaceLocked, out.Code)
	var op *events.Op
	require.Eventually(t, func() bool {
		op, err = c.Op(ctx, out.OpID)
		return err == nil
	}, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, a.PolicyHash(), op.PolicyHash)
	assert.NotEmpty(t, op.PolicyHash)
}

// Copies of an op's request (a retry stored after the dedupe window, a
// copy published without Nats-Msg-Id) are erased once the gate has
// answered them: the op reads its args from the message that created it,
// which stays while the op is not terminal, here while it is held.
func TestCopiesOfARequestAreErased(t *testing.T) {
	a := apptest.StartApp(t, app.Config{Policy: policy.Spec{
		Tools:      map[string]string{"echo": "write"},
		Workspaces: map[string]policy.WorkspaceSpec{"review": {Mode: "confirm"}},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := events.Request{Workspace: "review", Agent: "ag", Tool: "echo", Args: json.RawMessage(`{"copy":"me"}`)}
	require.NoError(t, req.Validate())
	body, err := json.Marshal(req)
	require.NoError(t, err)
	var seqs []uint64
	for range 3 {
		m := events.NewMessage(events.RequestSubject("review", "ag"), events.TypeRequested, "test", "", req.FingerprintHex(), body)
		ack, err := a.JetStream.PublishMsg(ctx, m) // no Nats-Msg-Id: every copy is stored
		require.NoError(t, err)
		seqs = append(seqs, ack.Sequence)
	}
	opID := events.OpID(req.Fingerprint())
	var op *events.Op
	require.Eventually(t, func() bool {
		op, err = a.Store.Op(opID)
		return err == nil && op.State == events.StateHeld
	}, 10*time.Second, 10*time.Millisecond)
	reqs, err := a.JetStream.Stream(ctx, streams.Requests)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := reqs.Info(ctx)
		return err == nil && info.State.Msgs == 0
	}, 10*time.Second, 10*time.Millisecond, "two copies erased, and the op's own request moved out")
	assert.Contains(t, seqs, op.RequestSeq)
	// The held op's own request stays, in AIRLOCK_HELD while it is held.
	held, err := a.JetStream.Stream(ctx, streams.Held)
	require.NoError(t, err)
	raw, err := held.GetLastMsgForSubject(ctx, events.HeldSubject(opID))
	require.NoError(t, err, "the held op's own request stays")
	assert.Contains(t, string(raw.Data), `"copy":"me"`)
	info, err := held.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), info.State.Msgs, "one copy, whichever of the three messages was first")

	// Every copy was settled.
	waitSettled(t, a.JetStream, streams.Requests, streams.GateConsumer)
}

// policyLocked locks workspace vault, leaves open automatic, and makes
// the writer tool a write.

func policyLocked() policy.Spec {
	return policy.Spec{
		Tools:      map[string]string{"writer": "write"},
		Workspaces: map[string]policy.WorkspaceSpec{"vault": {Mode: "locked"}, "open": {Mode: "auto"}},
	}
}
