package oplog

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A held op's request leaves AIRLOCK_REQUESTS for AIRLOCK_HELD: a hold
// lasts up to its hold_ttl, and while one request of a file store block
// is live, JetStream keeps every deleted request of that block on disk
// with it. Moved out, the requests of the ops around it leave the disk as
// soon as their block empties (ADR 0017).

// MoveToHeld copies the request message at seq of held op op (its
// headers hdr and body data, as the gate's delivery of it carried them)
// into AIRLOCK_HELD, then deletes it from AIRLOCK_REQUESTS. Both steps are
// idempotent: a copy already there is kept (one message per op), a
// request already deleted counts as deleted. Readers find the request in
// either place (RequestMsg). A move can land after its op has ended and
// its copy was looked for: the scrub looks again (EraseHeld).
func MoveToHeld(ctx context.Context, js jetstream.JetStream, requests jetstream.Stream, seq uint64, op string, hdr nats.Header, data []byte) error {
	msg := &nats.Msg{Subject: events.HeldSubject(op), Header: nats.Header{}, Data: data}
	for k, vs := range hdr {
		// The request's own headers, not JetStream's (Nats-Msg-Id, and
		// those a read adds): AIRLOCK_HELD adds its own.
		if !strings.HasPrefix(strings.ToLower(k), "nats-") {
			msg.Header[k] = vs
		}
	}
	_, err := js.PublishMsg(ctx, msg, jetstream.WithMsgID("held."+op), jetstream.WithExpectLastSequencePerSubject(0))
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		err = nil // the copy is there
	}
	if err != nil {
		return fmt.Errorf("move request %d to %s: %w", seq, streams.Held, err)
	}
	return DeleteRequest(ctx, requests, seq)
}

// HeldMsg reads op's request from AIRLOCK_HELD with a direct get over nc
// (which any role allowed to read requests may make); with js set (a
// connection that may call the stream API), a "not found" is asked again
// of the stream's leader. It is jetstream.ErrMsgNotFound when there is no
// copy.
func HeldMsg(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, op string) (*jetstream.RawStreamMsg, error) {
	m, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+streams.Held+"."+events.HeldSubject(op), nil)
	if err != nil {
		return nil, fmt.Errorf("held request of %s: %w", op, err)
	}
	if status := m.Header.Get("Status"); status != "" {
		if status != "404" {
			return nil, fmt.Errorf("held request of %s: status %s %s", op, status, m.Header.Get("Description"))
		}
		if js == nil {
			return nil, jetstream.ErrMsgNotFound
		}
		return LeaderLastMsg(ctx, js, streams.Held, events.HeldSubject(op))
	}
	return &jetstream.RawStreamMsg{Subject: events.HeldSubject(op), Header: m.Header, Data: m.Data}, nil
}

// EraseHeld erases op's copy in AIRLOCK_HELD with a secure delete, and
// reports whether there was one. No copy counts as erased.
func EraseHeld(ctx context.Context, held jetstream.Stream, op string) (bool, error) {
	raw, err := held.GetLastMsgForSubject(ctx, events.HeldSubject(op))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("erase held request of %s: %w", op, err)
	}
	err = held.SecureDeleteMsg(ctx, raw.Sequence)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("erase held request of %s: %w", op, err)
	}
	return true, nil
}

// HeldRequest reads and checks op's request from AIRLOCK_HELD, as
// Request does from AIRLOCK_REQUESTS.
func HeldRequest(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, op string) (*events.Request, error) {
	raw, err := HeldMsg(ctx, nc, js, op)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, &notFound{err: events.Errorf(events.CodeRequestUnavailable, "the request of %s is gone", op)}
	}
	if err != nil {
		return nil, err
	}
	return ParseRequest(raw.Header, raw.Data, 0, op)
}
