package producers

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/nats-io/nats.go"
)

// DefaultQueryTimeout bounds a query when ctx has no deadline.
const DefaultQueryTimeout = 5 * time.Second

// Op returns the op with id as the projection holds it. It returns an
// *events.Error with code NOT_FOUND for an op the projection does not hold
// (yet).
func (c *Client) Op(ctx context.Context, id string) (*events.Op, error) {
	var op events.Op
	if err := c.query(ctx, events.QueryOpSubject, events.OpQuery{OpID: id}, &op); err != nil {
		return nil, err
	}
	return &op, nil
}

// List returns one page of ops, of one state or of all when state is "".
func (c *Client) List(ctx context.Context, q events.ListQuery) (*events.ListResult, error) {
	var res events.ListResult
	if err := c.query(ctx, events.QueryOpsSubject, q, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

func (c *Client) query(ctx context.Context, subject string, in, out any) error {
	resp, err := request(ctx, c.nc, subject, in, DefaultQueryTimeout)
	if err != nil {
		return err
	}
	return decodeResponse(resp, out)
}

// request sends in as JSON on subject and returns the answer, within
// timeout when ctx has no deadline. A transport failure is UNAVAILABLE and
// retryable.
func request(ctx context.Context, nc *nats.Conn, subject string, in any, timeout time.Duration) (*nats.Msg, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	body, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	resp, err := nc.RequestWithContext(ctx, subject, body)
	if err != nil {
		return nil, &events.Error{Code: events.CodeUnavailable, Message: fmt.Sprintf("request on %s: %v", subject, err), Retryable: true}
	}
	return resp, nil
}

// decodeResponse turns a micro service response into out or an
// *events.Error.
func decodeResponse(resp *nats.Msg, out any) error {
	if code := resp.Header.Get("Nats-Service-Error-Code"); code != "" {
		var e events.Error
		if json.Unmarshal(resp.Data, &e) != nil || e.Code == "" {
			e = events.Error{Code: events.Code(code), Message: resp.Header.Get("Nats-Service-Error")}
		}
		return &e
	}
	if err := json.Unmarshal(resp.Data, out); err != nil {
		return events.Errorf(events.CodeInternal, "decode query response: %v", err)
	}
	return nil
}

// EnsureLive is for a client that subscribed to the live feed
// (events.LivePrefix): Airlock counts the feed's subscribers, turns the
// feed on if there are any, and answers. Every message the ops stream
// stores from then on is republished while the subscription lasts. The
// status says whether the feed is on (false when Airlock saw no
// subscriber) and its mode. Without the call, a subscriber of a feed in
// mode auto sees messages from within a poll interval of subscribing
// (docs/subjects.md).
func EnsureLive(ctx context.Context, nc *nats.Conn) (events.LiveStatus, error) {
	var st events.LiveStatus
	resp, err := request(ctx, nc, events.QueryLiveSubject, struct{}{}, DefaultQueryTimeout)
	if err != nil {
		return st, err
	}
	err = decodeResponse(resp, &st)
	return st, err
}

// Tools asks Airlock for the tools it serves, with their classes under
// the policy in force, descriptions and input schemas.
func (c *Client) Tools(ctx context.Context) (*events.ToolCatalog, error) {
	var out events.ToolCatalog
	if err := c.query(ctx, events.QueryToolsSubject, struct{}{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
