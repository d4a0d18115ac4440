package producers

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/nats-io/nuid"
)

// Result fetches the result Airlock keeps of completed op opID for agent,
// the agent that requested it (this client's credential: the server lets
// a principal ask only under its own name), opens it with the client's
// agent key (WithAgentKey) and checks it against the digest in the op's
// completed event. Errors are *events.Error: NOT_FOUND, NOT_REQUESTER
// (another agent's op: its digest is in the message), NOT_COMPLETED,
// RESULT_EXPIRED, RESULT_NOT_KEPT, RESULT_MISMATCH, NO_CREDENTIAL (no
// key to open it with). A result kept with erase on delivery is erased
// once it is checked. The projection answers, a moment behind the op's
// events: an op it does not hold yet, or not as completed yet, is asked
// for again for up to 2 s (resultTries x resultRetry) before the error
// is returned.
func (c *Client) Result(ctx context.Context, agent, opID string) (Outcome, error) {
	if !events.ValidName(agent) || !events.ValidOpID(opID) {
		return Outcome{}, events.Errorf(events.CodeInvalidQuery, "want an agent name and an op id (op_<32 hex>)")
	}
	var ans events.ResultAnswer
	for try := 0; ; try++ {
		err := c.query(ctx, events.ResultQuerySubject(agent), events.ResultQuery{OpID: opID}, &ans)
		if err == nil {
			break
		}
		if !behind(err) || try+1 >= resultTries {
			return Outcome{OpID: opID}, err
		}
		select {
		case <-time.After(resultRetry):
		case <-ctx.Done():
			return Outcome{OpID: opID}, err
		}
	}
	// The result is there, and this is its agent: have it sent where only
	// the agent may subscribe, never to the request's inbox.
	full, err := c.fetch(ctx, agent, opID)
	if err != nil {
		return Outcome{OpID: opID}, err
	}
	ans = full
	o := Outcome{
		OpID: ans.OpID, State: ans.State, Result: ans.Result, ResultDigest: ans.ResultDigest, ResultBytes: ans.ResultBytes,
		ResultKeptUntil: ans.KeptUntil, sealed: ans.Sealed, eraseOnDelivery: ans.EraseOnDelivery,
	}
	if o.OpID != opID {
		return Outcome{OpID: opID}, events.Errorf(events.CodeInternal, "answer about op %s, not %s", o.OpID, opID)
	}
	if err := c.open(ctx, agent, &o); err != nil {
		return o, err
	}
	return o, nil
}

// fetch asks for op's result to be published to a reply subject of
// agent's, and returns what arrives there.
func (c *Client) fetch(ctx context.Context, agent, opID string) (events.ResultAnswer, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultQueryTimeout)
		defer cancel()
	}
	to := events.ReplyPrefix(agent) + c.token + ".r." + nuid.Next()
	sub, err := c.nc.SubscribeSync(to)
	if err != nil {
		return events.ResultAnswer{}, &events.Error{Code: events.CodeUnavailable, Message: "subscribe to " + to + ": " + err.Error(), Retryable: true}
	}
	defer sub.Unsubscribe()
	if err := c.nc.Flush(); err != nil {
		return events.ResultAnswer{}, &events.Error{Code: events.CodeUnavailable, Message: err.Error(), Retryable: true}
	}
	var meta events.ResultAnswer
	if err := c.query(ctx, events.ResultQuerySubject(agent), events.ResultQuery{OpID: opID, ReplyTo: to}, &meta); err != nil {
		return events.ResultAnswer{}, err
	}
	m, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return events.ResultAnswer{}, &events.Error{Code: events.CodeUnavailable, Message: "the result was sent to " + to + " and did not arrive: " + err.Error(), Retryable: true}
	}
	var full events.ResultAnswer
	if err := json.Unmarshal(m.Data, &full); err != nil || full.OpID != opID {
		return events.ResultAnswer{}, events.Errorf(events.CodeInternal, "the message on %s is no answer about %s", to, opID)
	}
	return full, nil
}

// open turns o's sealed result into its result, checks the result against
// o's digest, and confirms delivery of a result kept with erase on
// delivery.
func (c *Client) open(ctx context.Context, agent string, o *Outcome) error {
	if o.Result == nil && o.sealed != nil {
		if c.opener == nil {
			return events.Errorf(events.CodeNoCredential,
				"the result of %s is sealed to agent %s's key, and this client has none: give it the agent's seed (producers.WithAgentKey; the CLI uses the creds file it connects with)", o.OpID, agent)
		}
		plain, err := c.opener.Open(o.OpID, o.sealed)
		if err != nil {
			return events.Errorf(events.CodeResultMismatch,
				"the result of %s does not open with agent %s's key: it was sealed to another key or changed; its digest is %s", o.OpID, agent, o.ResultDigest)
		}
		o.Result = plain
	}
	o.sealed = nil
	if o.Result == nil {
		return nil
	}
	if got := events.Digest(o.Result); got != o.ResultDigest {
		o.Result = nil
		return events.Errorf(events.CodeResultMismatch,
			"the result of %s has digest %s, but its completed event records %s: not used", o.OpID, got, o.ResultDigest)
	}
	if o.eraseOnDelivery {
		o.eraseOnDelivery = false
		if c.confirm(ctx, agent, o.OpID) {
			o.ResultKeptUntil = nil
		}
	}
	return nil
}

// confirm tells Airlock that agent has op's result, so that a result kept
// with erase on delivery is erased, and reports whether it was. Best
// effort: a confirmation that is lost leaves the result until its
// retention ends. The projection may not have folded the completion yet
// (the runner's reply comes first): that is asked again.
func (c *Client) confirm(ctx context.Context, agent, opID string) bool {
	for try := 0; try < resultTries; try++ {
		var ans events.ResultAnswer
		err := c.query(ctx, events.ResultQuerySubject(agent), events.ResultQuery{OpID: opID, Delivered: true}, &ans)
		if err == nil {
			return ans.Erased
		}
		if !behind(err) {
			return false
		}
		select {
		case <-time.After(resultRetry):
		case <-ctx.Done():
			return false
		}
	}
	return false
}

// resultTries and resultRetry bound how long Result asks for a result the
// projection has not folded yet.
const (
	resultTries = 10
	resultRetry = 200 * time.Millisecond
)

// withResult completes a completed outcome: a result in hand is checked
// against its digest; a sealed one is opened; without either, a kept
// result is fetched. What stops it from getting the result is in
// ResultCode and ResultError, except a mismatch, which is an error.
func (c *Client) withResult(ctx context.Context, agent string, o Outcome) (Outcome, error) {
	if o.Result != nil || o.sealed != nil {
		if err := c.open(ctx, agent, &o); err != nil {
			return c.resultProblem(o, err)
		}
		return o, nil
	}
	if o.erased != "" {
		o.ResultCode, o.ResultError = events.CodeResultExpired, "the result is no longer kept ("+o.erased+")"
		return o, nil
	}
	got, err := c.Result(ctx, agent, o.OpID)
	if err != nil {
		return c.resultProblem(o, err)
	}
	got.Code, got.Message = o.Code, o.Message
	return got, nil
}

// behind reports whether err may only mean that the projection has not
// folded the op's newest events yet.
func behind(err error) bool {
	var e *events.Error
	return errors.As(err, &e) && (e.Code == events.CodeNotFound || (e.Code == events.CodeNotCompleted && e.Retryable) || e.Code == events.CodeUnavailable)
}

// resultProblem says in o why it has no result; a mismatch is an error.
func (c *Client) resultProblem(o Outcome, err error) (Outcome, error) {
	o.Result, o.sealed = nil, nil
	var e *events.Error
	if !errors.As(err, &e) {
		e = events.Errorf(events.CodeUnavailable, "%v", err)
	}
	if e.Code == events.CodeResultMismatch {
		return o, e
	}
	o.ResultCode, o.ResultError = e.Code, e.Message
	return o, nil
}
