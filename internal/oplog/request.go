package oplog

import (
	"context"
	"errors"
	"fmt"

	"github.com/airlock-dev/airlock/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Request reads the request of op opID from the requests stream at seq and
// checks that it is the op's: its fingerprint must derive opID. A request
// that is gone, does not decode or is another op's is an *events.Error
// with code REQUEST_UNAVAILABLE; other errors are transport trouble.
//
// js, when set, is a JetStream context that may call the stream API (not
// a client's): a direct get's "not found" is then asked of the leader
// (see RequestMsg).
func Request(ctx context.Context, js jetstream.JetStream, requests jetstream.Stream, seq uint64, opID string) (*events.Request, error) {
	req, _, err := RequestMsg(ctx, js, requests, seq, opID)
	return req, err
}

// RequestMsg is Request, and also returns the request message's header.
// With js set, a request moved to AIRLOCK_HELD (a held op's) is read
// there; a client without js reads it with HeldMsg.
//
// A direct get may be answered by a replica that has not stored the
// request yet, and its "not found" says nothing: with js set, such an
// answer is asked again of the stream's leader, and only the leader's
// "not found" means the request is gone.
func RequestMsg(ctx context.Context, js jetstream.JetStream, requests jetstream.Stream, seq uint64, opID string) (*events.Request, nats.Header, error) {
	raw, err := requests.GetMsg(ctx, seq)
	if info := requests.CachedInfo(); errors.Is(err, jetstream.ErrMsgNotFound) && js != nil && info != nil && info.Config.AllowDirect {
		raw, err = LeaderMsg(ctx, js, info.Config.Name, seq)
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) && js != nil {
		// A held op's request is in AIRLOCK_HELD.
		raw, err = HeldMsg(ctx, js.Conn(), js, opID)
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil, &notFound{err: events.Errorf(events.CodeRequestUnavailable, "request message %d is gone", seq)}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("fetch request %d: %w", seq, err)
	}
	req, err := ParseRequest(raw.Header, raw.Data, seq, opID)
	return req, raw.Header, err
}

// HeldRequestMsg is RequestMsg for an op that was held: the gate moved
// its request to AIRLOCK_HELD when it held it (ADR 0017), so it is read
// there first, one read where RequestMsg takes three (a direct get and
// the leader's answer from the requests stream, then the held stream's).
// A hold made by a version that left the request where it was is read
// as RequestMsg reads it.
func HeldRequestMsg(ctx context.Context, js jetstream.JetStream, requests jetstream.Stream, seq uint64, opID string) (*events.Request, nats.Header, error) {
	raw, err := HeldMsg(ctx, js.Conn(), js, opID)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return RequestMsg(ctx, js, requests, seq, opID)
	}
	if err != nil {
		return nil, nil, err
	}
	req, err := ParseRequest(raw.Header, raw.Data, seq, opID)
	return req, raw.Header, err
}

// notFound is the REQUEST_UNAVAILABLE of a request the stream said it
// does not hold (rather than one that does not decode or is another
// op's): NotFound reports it.
type notFound struct{ err *events.Error }

func (e *notFound) Error() string { return e.err.Error() }
func (e *notFound) Unwrap() error { return e.err }

// NotFound reports whether err is Request's answer for a request message
// the stream said it does not hold.
func NotFound(err error) bool {
	var nf *notFound
	return errors.As(err, &nf)
}

// ParseRequest decodes the request message at seq and checks that it is the
// request of op opID.
func ParseRequest(h nats.Header, body []byte, seq uint64, opID string) (*events.Request, error) {
	req, err := events.DecodeRequest(h, body)
	if err != nil {
		return nil, events.Errorf(events.CodeRequestUnavailable, "request message %d: %v", seq, err)
	}
	if events.OpID(req.Fingerprint()) != opID {
		return nil, events.Errorf(events.CodeRequestUnavailable, "message %d is not the request of %s", seq, opID)
	}
	return req, nil
}

// EraseRequest erases the request message at seq from the requests
// stream with JetStream's secure delete, which overwrites the stored
// record. A message that is already gone counts as erased, so erasing is
// idempotent.
func EraseRequest(ctx context.Context, requests jetstream.Stream, seq uint64) error {
	return eraseRequest(ctx, requests, seq, true)
}

// DeleteRequest deletes the request message at seq without overwriting
// it: no NATS API returns it again at once, and its bytes leave the
// stream's files when JetStream removes the block that holds them (once
// every message in the block is deleted). It costs a small tombstone
// where a secure delete writes the whole block again. Idempotent too.
func DeleteRequest(ctx context.Context, requests jetstream.Stream, seq uint64) error {
	return eraseRequest(ctx, requests, seq, false)
}

func eraseRequest(ctx context.Context, requests jetstream.Stream, seq uint64, secure bool) error {
	var err error
	if secure {
		err = requests.SecureDeleteMsg(ctx, seq)
	} else {
		err = requests.DeleteMsg(ctx, seq)
	}
	if err == nil || !errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
		return err
	}
	// The server refused: because the message is not there (deleted
	// already, by this process before a crash or by another), or for a
	// reason that holds (a stream that denies deletes). Only a look tells.
	if _, gerr := requests.GetMsg(ctx, seq); errors.Is(gerr, jetstream.ErrMsgNotFound) {
		return nil
	}
	return fmt.Errorf("erase request %d: %w", seq, err)
}
