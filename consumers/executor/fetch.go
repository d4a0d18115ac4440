package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go"
)

// maxFetchBatch bounds the request messages one batched direct get asks
// for.
const maxFetchBatch = 256

// fetchTimeout bounds one batched direct get; what it has not returned by
// then is read one by one.
const fetchTimeout = 5 * time.Second

// fetchAll reads the args of a batch of jobs: from the handoff when the
// gate of this process left them there, else from the stream. Requests of
// one workspace are read with one batched direct get (the server's
// next_by_subj batch); a request the batch did not return is read on its
// own.
func (r *Runner) fetchAll(ctx context.Context, jobs []*job) {
	if r.cfg.Handoff != nil {
		rest := jobs[:0:0]
		for _, j := range jobs {
			if args, ok := r.cfg.Handoff.Take(j.d.item.OpID, j.d.item.RequestSeq); ok {
				j.call = callOf(j.d.item)
				j.call.Args = args
			} else {
				rest = append(rest, j)
			}
		}
		if jobs = rest; len(jobs) == 0 {
			return
		}
	}
	if len(jobs) == 1 {
		jobs[0].call, jobs[0].fetch = r.fetch(ctx, jobs[0].d.item)
		return
	}
	byWS := map[string][]*job{}
	for _, j := range jobs {
		byWS[j.d.item.Workspace] = append(byWS[j.d.item.Workspace], j)
	}
	var missing []*job
	for ws, group := range byWS {
		got, err := r.directBatch(ctx, ws, group)
		if err != nil {
			r.cfg.Logger.Debug("batched request fetch failed; fetching one by one", "ws", ws, "err", err)
		}
		for _, j := range group {
			if args, ok := got[j.d.item.OpID]; ok {
				j.call = callOf(j.d.item)
				j.call.Args = args
			} else {
				missing = append(missing, j)
			}
		}
	}
	r.each(missing, func(j *job) { j.call, j.fetch = r.fetch(ctx, j.d.item) })
}

// directBatch asks for the request messages of one workspace from the
// smallest sequence the group needs, bodies only, and returns the args of
// the group's ops by op id. A body is matched to an op by its content: its
// fingerprint must derive the op id, which is the same check a single fetch
// makes, so a body that is not some op's request is never taken for it.
func (r *Runner) directBatch(ctx context.Context, ws string, group []*job) (map[string]json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	seqs := make([]uint64, 0, len(group))
	want := make(map[string]bool, len(group))
	for _, j := range group {
		seqs = append(seqs, j.d.item.RequestSeq)
		want[j.d.item.OpID] = true
	}
	body, err := json.Marshal(struct {
		Seq       uint64 `json:"seq"`
		NextFor   string `json:"next_by_subj"`
		Batch     int    `json:"batch"`
		NoHeaders bool   `json:"no_hdr"`
	}{slices.Min(seqs), events.WorkspaceRequests(ws), fetchSpan(seqs), true})
	if err != nil {
		return nil, err
	}
	nc := r.cfg.JetStream.Conn()
	inbox := nc.NewInbox()
	ch := make(chan *nats.Msg, maxFetchBatch+2)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$JS.API.DIRECT.GET."+streams.Requests, inbox, body); err != nil {
		return nil, err
	}
	got := make(map[string]json.RawMessage, len(group))
	for {
		var m *nats.Msg
		select {
		case m = <-ch:
		case <-ctx.Done():
			return got, ctx.Err()
		}
		if status := m.Header.Get("Status"); status != "" {
			if status == "204" || status == "404" {
				return got, nil // end of batch, or nothing there
			}
			return got, fmt.Errorf("direct get: status %s %s", status, m.Header.Get("Description"))
		}
		if req, err := requestFromBody(m.Data); err == nil {
			if op := events.OpID(req.Fingerprint()); want[op] {
				got[op] = req.Args
			}
		}
	}
}

// fetchSpan is how many request messages to ask for: every one from the
// smallest sequence to the largest (requests of other ops in between
// included, since they share the stream), at most maxFetchBatch; what lies
// beyond is read one by one.
func fetchSpan(seqs []uint64) int {
	return int(min(slices.Max(seqs)-slices.Min(seqs)+1, maxFetchBatch))
}

// requestFromBody reads a stored request from its body alone (a batched
// direct get returns no headers).
func requestFromBody(body []byte) (*events.Request, error) {
	return events.DecodeStoredRequestBody(body)
}

// fetch reads the op's args from its request message and checks that they
// are the op's: the request's fingerprint must derive the op id.
func (r *Runner) fetch(ctx context.Context, item work) (Call, error) {
	call := callOf(item)
	req, err := oplog.Request(ctx, r.cfg.JetStream, r.requests, item.RequestSeq, item.OpID)
	if err != nil {
		return call, err
	}
	call.Args = req.Args
	return call, nil
}

func callOf(item work) Call {
	return Call{OpID: item.OpID, Workspace: item.Workspace, Agent: item.Agent, Tool: item.Tool}
}
