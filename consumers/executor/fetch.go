package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go"
)

// maxFetchBatch bounds the request messages one batched direct get asks
// for.
const maxFetchBatch = 256

// fetchAll reads the args of a batch of jobs. Requests of one workspace are
// read with one batched direct get (the server's next_by_subj batch); a
// request the batch did not return is read on its own.
func (r *Runner) fetchAll(ctx context.Context, jobs []*job) {
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
			if m, ok := got[j.d.item.RequestSeq]; ok {
				j.call, j.fetch = parseRequest(j.d.item, m.Header, m.Data)
			} else {
				missing = append(missing, j)
			}
		}
	}
	r.each(missing, func(j *job) { j.call, j.fetch = r.fetch(ctx, j.d.item) })
}

// directBatch asks for the request messages of one workspace from the
// smallest sequence the group needs, and returns those the group needs.
func (r *Runner) directBatch(ctx context.Context, ws string, group []*job) (map[uint64]*nats.Msg, error) {
	seqs := make([]uint64, 0, len(group))
	for _, j := range group {
		seqs = append(seqs, j.d.item.RequestSeq)
	}
	slices.Sort(seqs)
	want := make(map[uint64]bool, len(seqs))
	for _, s := range seqs {
		want[s] = true
	}
	body, err := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		NextFor string `json:"next_by_subj"`
		Batch   int    `json:"batch"`
	}{seqs[0], events.RequestSubject(ws), min(len(seqs)+8, maxFetchBatch)})
	if err != nil {
		return nil, err
	}
	nc := r.cfg.JetStream.Conn()
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$JS.API.DIRECT.GET."+streams.Requests, inbox, body); err != nil {
		return nil, err
	}
	got := make(map[uint64]*nats.Msg, len(seqs))
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return got, err
		}
		if status := m.Header.Get("Status"); status != "" {
			if status == "204" || status == "404" {
				return got, nil // end of batch, or nothing there
			}
			return got, fmt.Errorf("direct get: status %s %s", status, m.Header.Get("Description"))
		}
		seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		if err != nil {
			return got, fmt.Errorf("direct get: bad Nats-Sequence %q", m.Header.Get("Nats-Sequence"))
		}
		if want[seq] {
			got[seq] = m
		}
	}
}
