// Package oplog appends transitions to an op's own subject with JetStream's
// compare-and-swap (Nats-Expected-Last-Subject-Sequence) and reads the
// newest one back. It is the only way Airlock writes op events.
package oplog

import (
	"context"
	"errors"
	"fmt"

	"github.com/airlock-dev/airlock/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrConflict means the op subject's last sequence was not the expected one:
// another writer's transition won. Read the op again and decide.
var ErrConflict = errors.New("oplog: compare-and-swap lost")

// Event is an op event read back from the stream.
type Event struct {
	Type events.Type
	ID   string // ce-id
	Seq  uint64 // stream sequence
	Data any    // the *T of events.DecodeData
}

// Append publishes one transition of type t to subject, expecting the
// subject's last stream sequence to be expect (0 for a new op). It returns
// the new event's stream sequence, or an error wrapping ErrConflict when the
// compare-and-swap lost.
//
// When the publish's outcome is unknown (a timeout after the server may
// have stored it), Append reads the subject back: its own event there means
// success; the subject unmoved means it is safe to publish once more.
func Append(ctx context.Context, js jetstream.JetStream, stream jetstream.Stream, subject string, expect uint64, t events.Type, source, opID string, data any) (uint64, error) {
	ev, err := events.NewEvent(t, source, opID, data)
	if err != nil {
		return 0, err
	}
	for try := 0; ; try++ {
		ack, err := js.PublishMsg(ctx, events.Encode(subject, ev), jetstream.WithExpectLastSequencePerSubject(expect))
		if err == nil {
			return ack.Sequence, nil
		}
		if IsConflict(err) {
			return 0, fmt.Errorf("%w: %s expected %d: %v", ErrConflict, subject, expect, err)
		}
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoStreamResponse) {
			return 0, fmt.Errorf("append %s to %s: %w", t.Short(), subject, err)
		}
		if try > 0 || ctx.Err() != nil {
			return 0, fmt.Errorf("append %s to %s: outcome unknown: %w", t.Short(), subject, err)
		}
		last, lerr := Last(ctx, stream, subject)
		switch {
		case lerr == nil && last.ID == ev.ID():
			return last.Seq, nil // it landed
		case errors.Is(lerr, ErrEmpty) && expect == 0, lerr == nil && last.Seq == expect:
			continue // it did not land; publish once more
		case lerr == nil:
			return 0, fmt.Errorf("%w: %s moved to %d while publishing", ErrConflict, subject, last.Seq)
		default:
			return 0, fmt.Errorf("append %s to %s: outcome unknown: %w", t.Short(), subject, err)
		}
	}
}

// IsConflict reports whether err is JetStream's wrong-last-sequence error.
func IsConflict(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return errors.Is(err, ErrConflict)
}

// ErrEmpty means the subject holds no event: the op does not exist.
var ErrEmpty = errors.New("oplog: no event on subject")

// Last returns the newest event on an op subject, or ErrEmpty.
func Last(ctx context.Context, stream jetstream.Stream, subject string) (*Event, error) {
	raw, err := stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, ErrEmpty
	}
	if err != nil {
		return nil, fmt.Errorf("last event on %s: %w", subject, err)
	}
	return Decode(raw)
}

// Decode decodes a stored op event.
func Decode(raw *jetstream.RawStreamMsg) (*Event, error) {
	ev, err := events.Decode(raw.Header, raw.Data)
	if err != nil {
		return nil, fmt.Errorf("event %d on %s: %w", raw.Sequence, raw.Subject, err)
	}
	data, err := events.DecodeData(ev)
	if err != nil {
		return nil, fmt.Errorf("event %d on %s: %w", raw.Sequence, raw.Subject, err)
	}
	return &Event{Type: events.Type(ev.Type()), ID: ev.ID(), Seq: raw.Sequence, Data: data}, nil
}
