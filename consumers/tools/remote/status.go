package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
	"github.com/nats-io/nats.go"
)

// Recover decides a lost attempt from the tool server's status of it:
//
//   - done with a result: Done with that result;
//   - done with EXECUTION_AMBIGUOUS: Ambiguous with the server's message;
//   - done with another error: Rerun, which the server answers with its
//     recorded error (it is idempotent per op id), failing the op;
//   - never: Rerun, under a new attempt (the server now refuses the lost
//     one);
//   - unknown, a refusal or a reply that is not protocol v1: Ambiguous,
//     saying what is known.
//
// It returns an error, so that the claim stands and recovery asks again
// later, when the server cannot answer now: no status responder (it may be
// restarting), no answer in time, a transport error, or "running" (the
// lost call is still being worked on there); and when ctx ends first.
//
// The tool server's records are shared: any instance asks the same server,
// so the answer does not depend on lost.Own.
func (r *Remote) Recover(ctx context.Context, c executor.Call, l executor.Lost) (executor.Recovery, error) {
	lost := l.Attempt
	st, said, later := r.status(ctx, c.OpID, lost)
	if ctx.Err() != nil {
		return executor.Recovery{}, fmt.Errorf("recover %s from %s: %w", c.OpID, r.StatusSubject(), ctx.Err())
	}
	if later || (st != nil && st.State == StateRunning) {
		return executor.Recovery{}, fmt.Errorf("recover %s: the tool server cannot say yet (%s); asking again later", c.OpID, said)
	}
	if st != nil {
		switch {
		case st.State == StateDone && st.Error == nil:
			if e := r.storable(st.Result); e != nil {
				return executor.Recovery{Action: executor.Ambiguous, Known: e.Message}, nil
			}
			return executor.Recovery{Action: executor.Done, Result: st.Result}, nil
		case st.State == StateDone && events.Code(st.Error.Code) == events.CodeAmbiguous:
			return executor.Recovery{Action: executor.Ambiguous, Known: r.failure(st.Error).Message}, nil
		case st.State == StateDone, st.State == StateNever:
			return executor.Recovery{Action: executor.Rerun}, nil
		}
	}
	return executor.Recovery{
		Action: executor.Ambiguous,
		Known:  fmt.Sprintf("remote call to %s, attempt %s, lost with its runner; status: %s", r.cfg.Subject, lost, said),
	}, nil
}

// status asks the tool server what became of attempt of op. It returns the
// reply when there is one that parses and states something, always a
// description of what was learnt for an ambiguous op's message, and
// whether the server could not be asked now (later is worth a try).
func (r *Remote) status(ctx context.Context, op, attempt string) (st *StatusReply, said string, later bool) {
	st, said = r.query(ctx, op, attempt)
	return st, said, st == nil && strings.HasPrefix(said, transientPrefix)
}

// transientPrefix starts the description of a query that got no answer.
const transientPrefix = "no "

func (r *Remote) query(ctx context.Context, op, attempt string) (*StatusReply, string) {
	subject := r.StatusSubject()
	body, err := json.Marshal(StatusRequest{V: Version, OpID: op, Attempt: attempt})
	if err != nil {
		return nil, "query not sent: " + err.Error()
	}
	qctx, cancel := context.WithTimeout(ctx, r.cfg.StatusTimeout)
	defer cancel()
	msg := &nats.Msg{Subject: subject, Data: body, Header: nats.Header{}}
	msg.Header.Set(HeaderOpID, op)
	msg.Header.Set(HeaderAttempt, attempt)
	m, err := r.cfg.Conn.RequestMsgWithContext(qctx, msg)
	switch {
	case err == nil:
	case errors.Is(err, nats.ErrNoResponders):
		return nil, "no status responder on " + subject
	case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Sprintf("no answer on %s in %s", subject, r.cfg.StatusTimeout)
	default:
		return nil, "no answer: query on " + subject + " failed: " + err.Error()
	}
	st, err := DecodeStatusReply(m.Data)
	if err != nil {
		return nil, "reply on " + subject + " is not protocol v1 (" + err.Error() + ")"
	}
	if st.State == "" {
		return nil, "the tool server refused the query: " + serverCode(st.Error.Code) + ", " + describeMessage(st.Error.Message)
	}
	r.cfg.Logger.Debug("remote status", "op", op, "subject", subject, "state", st.State)
	return st, said[st.State]
}

// said describes each state in an ambiguous op's message.
var said = map[State]string{
	StateDone:    "done",
	StateNever:   "never",
	StateRunning: "running (the tool server started it and has no outcome yet)",
	StateUnknown: "unknown (the tool server cannot tell whether it ran)",
}
