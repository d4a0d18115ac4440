package projector

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Query service identity.
const (
	ServiceName    = "airlock-query"
	ServiceVersion = "1.1.0"
)

// Serve registers the query service on nc. Stop the returned service to
// remove it. Answers reflect what the projector has applied so far. key
// verifies the checkpoints proofs are built on; nil serves no proofs.
//
// live, when not nil, answers events.QueryLiveSubject: it makes sure the
// live feed is on if anyone subscribes to it, and says whether it is.
//
// caught, when not nil, answers a fresh question (events.OpQuery.Fresh)
// about an op the projection does not hold as of the moment it was
// asked: the answer waits until the projection holds every event the ops
// stream had stored then (at most CaughtUpWait). An op its asker has
// just seen stored (a hold its gate announced, a webhook, a watch) is
// found, not refused. Stop the service before closing st: it waits for
// those answers.
func Serve(nc *nats.Conn, st *store.Store, key *audit.Key, live LiveFunc, caught CaughtUpFunc) (micro.Service, error) {
	svc, err := micro.AddService(nc, micro.Config{
		Name:        ServiceName,
		Version:     ServiceVersion,
		Description: "Airlock op queries over the projection",
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	q := &query{nc: nc, st: st, key: key, caught: caught, waits: make(chan struct{}, MaxCaughtUpWaits), ctx: ctx, cancel: cancel}
	if err := svc.AddEndpoint("op", micro.HandlerFunc(q.op), micro.WithEndpointSubject(events.QueryOpSubject)); err != nil {
		svc.Stop()
		return nil, err
	}
	if err := svc.AddEndpoint("ops", micro.HandlerFunc(q.ops), micro.WithEndpointSubject(events.QueryOpsSubject)); err != nil {
		svc.Stop()
		return nil, err
	}
	if err := q.addAudit(svc); err != nil {
		svc.Stop()
		return nil, err
	}
	if live != nil {
		h := func(req micro.Request) {
			ctx, cancel := context.WithTimeout(context.Background(), liveTimeout)
			defer cancel()
			st, err := live(ctx)
			if err != nil {
				respondError(req, &events.Error{Code: events.CodeUnavailable, Message: err.Error(), Retryable: true})
				return
			}
			respond(req, st)
		}
		if err := svc.AddEndpoint("live", micro.HandlerFunc(h), micro.WithEndpointSubject(events.QueryLiveSubject)); err != nil {
			svc.Stop()
			return nil, err
		}
	}
	return service{Service: svc, q: q}, nil
}

// service is the query service; its Stop also ends, and waits for, the
// answers that wait for the projection.
type service struct {
	micro.Service
	q *query
}

// Stop stops the service and returns once no answer is in hand.
func (s service) Stop() error {
	err := s.Service.Stop()
	s.q.cancel()
	s.q.waiting.Wait()
	return err
}

// LiveFunc makes sure the live feed is on if anyone subscribes to it, and
// says whether it is (internal/livefeed.Feed.Sync).
type LiveFunc func(context.Context) (events.LiveStatus, error)

// liveTimeout bounds one answer of the live endpoint: a stream update.
const liveTimeout = 5 * time.Second

// CaughtUpFunc returns once the projection holds every event the ops
// stream had stored when it was called, or ctx ends.
type CaughtUpFunc func(ctx context.Context) error

// CaughtUpWait bounds how long the answer to a question about an op the
// projection does not hold waits for the projection to catch up with
// the ops stream; MaxCaughtUpWaits bounds the answers waiting so at once
// (past it, a miss is answered at once, NOT_FOUND and retryable, as the
// projection has it).
const (
	CaughtUpWait     = 2 * time.Second
	MaxCaughtUpWaits = 64
)

type query struct {
	nc     *nats.Conn
	st     *store.Store
	key    *audit.Key
	caught CaughtUpFunc
	waits  chan struct{} // a place for each answer waiting for caught
	// ctx ends with the service; waiting counts the answers in hand.
	ctx     context.Context
	cancel  context.CancelFunc
	waiting sync.WaitGroup
}

func (q *query) op(req micro.Request) {
	var in events.OpQuery
	if err := json.Unmarshal(req.Data(), &in); err != nil || !events.ValidOpID(in.OpID) {
		respondError(req, events.Errorf(events.CodeInvalidQuery, "want {\"op_id\": \"op_<32 hex>\"}"))
		return
	}
	op, err := q.st.Op(in.OpID)
	if errors.Is(err, store.ErrNotFound) && in.Fresh && q.caught != nil {
		// The projection may trail the stream: ask again once it holds
		// what the stream had when the question came, off the
		// endpoint's goroutine, which answers the other questions.
		select {
		case q.waits <- struct{}{}:
			later := detached{Request: req, nc: q.nc}
			q.waiting.Go(func() {
				defer func() { <-q.waits }()
				ctx, cancel := context.WithTimeout(q.ctx, CaughtUpWait)
				_ = q.caught(ctx) // caught up or not, the projection as it is then
				cancel()
				op, err := q.st.Op(in.OpID)
				q.answerOp(later, in.OpID, op, err)
			})
			return
		default:
		}
	}
	q.answerOp(req, in.OpID, op, err)
}

// detached answers a request after its handler has returned. The
// service reads its own request once the handler returns (for the
// endpoint's stats), so a late answer is published on the connection
// instead, with the headers micro would set; the endpoint's stats do not
// count it as an error.
type detached struct {
	micro.Request
	nc *nats.Conn
}

// Respond publishes data to the request's reply subject.
func (d detached) Respond(data []byte, opts ...micro.RespondOpt) error {
	m := &nats.Msg{Subject: d.Reply(), Data: data}
	for _, o := range opts {
		o(m)
	}
	return d.nc.PublishMsg(m)
}

// RespondJSON publishes v, as JSON, to the request's reply subject.
func (d detached) RespondJSON(v any, opts ...micro.RespondOpt) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return d.Respond(data, opts...)
}

// Error publishes an error answer, with micro's error headers.
func (d detached) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	h := micro.RespondOpt(func(m *nats.Msg) {
		m.Header = nats.Header{micro.ErrorHeader: []string{description}, micro.ErrorCodeHeader: []string{code}}
	})
	return d.Respond(data, append([]micro.RespondOpt{h}, opts...)...)
}

// answerOp answers a question about op id with what the projection read.
func (q *query) answerOp(req micro.Request, id string, op *events.Op, err error) {
	if errors.Is(err, store.ErrNotFound) {
		// Retryable: the projection may not have folded the op yet.
		respondError(req, &events.Error{Code: events.CodeNotFound, Message: "no op " + id, Retryable: true})
		return
	}
	if err != nil {
		respondError(req, events.Errorf(events.CodeInternal, "%v", err))
		return
	}
	respond(req, op)
}

func (q *query) ops(req micro.Request) {
	var in events.ListQuery
	if len(req.Data()) > 0 {
		if err := json.Unmarshal(req.Data(), &in); err != nil {
			respondError(req, events.Errorf(events.CodeInvalidQuery, "bad list query: %v", err))
			return
		}
	}
	var state events.State
	if in.State != "" {
		s, err := events.ParseState(in.State)
		if err != nil {
			respondError(req, err)
			return
		}
		state = s
	}
	if in.Limit < 0 || in.Limit > events.MaxPage {
		respondError(req, events.Errorf(events.CodeInvalidQuery, "limit %d outside 1..%d", in.Limit, events.MaxPage))
		return
	}
	if in.Limit == 0 {
		in.Limit = events.DefaultPage
	}
	if in.Workspace != "" && !events.ValidName(in.Workspace) {
		respondError(req, events.Errorf(events.CodeInvalidQuery, "workspace %q is not a valid name", in.Workspace))
		return
	}
	list := q.st.List
	if in.Newest {
		list = q.st.ListNewest
	}
	ops, next, err := list(state, in.Workspace, in.Cursor, in.Limit)
	if errors.Is(err, store.ErrBadCursor) {
		respondError(req, events.Errorf(events.CodeInvalidQuery, "%v", err))
		return
	}
	if err != nil {
		respondError(req, events.Errorf(events.CodeInternal, "%v", err))
		return
	}
	if ops == nil {
		ops = []*events.Op{}
	}
	respond(req, events.ListResult{Ops: ops, Next: next})
}

// respondError answers with the micro error headers set to the stable code
// and a JSON events.Error body.
func respondError(req micro.Request, err error) {
	var e *events.Error
	if !errors.As(err, &e) {
		e = events.Errorf(events.CodeInternal, "%v", err)
	}
	if !events.ValidResponse(req.Reply()) {
		return
	}
	body, _ := json.Marshal(e)
	_ = req.Error(string(e.Code), e.Message, body)
}

// respond answers with v as JSON, embedded results byte for byte.
func respond(req micro.Request, v any) {
	if !events.ValidResponse(req.Reply()) {
		return // answer inboxes only, never a stream's subjects
	}
	body, err := events.MarshalJSON(v)
	if err != nil {
		respondError(req, events.Errorf(events.CodeInternal, "%v", err))
		return
	}
	_ = req.Respond(body)
}
