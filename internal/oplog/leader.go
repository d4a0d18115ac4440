package oplog

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// LeaderMsg reads the message at seq from the stream's leader, with the
// JetStream API's STREAM.MSG.GET, where Stream.GetMsg uses a direct get
// that any replica may answer when the stream allows direct gets. It is
// ErrMsgNotFound (jetstream's) when the leader has no such message.
func LeaderMsg(ctx context.Context, js jetstream.JetStream, stream string, seq uint64) (*jetstream.RawStreamMsg, error) {
	req, _ := json.Marshal(struct {
		Seq uint64 `json:"seq"`
	}{seq})
	return leaderGet(ctx, js, stream, req, fmt.Sprint(seq))
}

// LeaderLastMsg reads the last message on subject from the stream's
// leader, as LeaderMsg does by sequence.
func LeaderLastMsg(ctx context.Context, js jetstream.JetStream, stream, subject string) (*jetstream.RawStreamMsg, error) {
	req, _ := json.Marshal(struct {
		Subject string `json:"last_by_subj"`
	}{subject})
	return leaderGet(ctx, js, stream, req, subject)
}

// LeaderNextMsg reads from the stream's leader the first message on
// subject at or after seq, as LeaderMsg does by sequence.
func LeaderNextMsg(ctx context.Context, js jetstream.JetStream, stream string, seq uint64, subject string) (*jetstream.RawStreamMsg, error) {
	req, _ := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		Subject string `json:"next_by_subj"`
	}{seq, subject})
	return leaderGet(ctx, js, stream, req, subject)
}

func leaderGet(ctx context.Context, js jetstream.JetStream, stream string, req []byte, what string) (*jetstream.RawStreamMsg, error) {
	nc := js.Conn()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	m, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, fmt.Errorf("leader get of %s: %w", what, err)
	}
	var resp struct {
		Error *jetstream.APIError `json:"error"`
		Msg   *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Header  []byte    `json:"hdrs"`
			Data    []byte    `json:"data"`
			Time    time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, fmt.Errorf("leader get of %s: %w", what, err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return nil, jetstream.ErrMsgNotFound
		}
		return nil, fmt.Errorf("leader get of %s: %w", what, resp.Error)
	}
	if resp.Msg == nil {
		return nil, fmt.Errorf("leader get of %s: empty answer", what)
	}
	var hdr nats.Header
	if len(resp.Msg.Header) > 0 {
		if hdr, err = nats.DecodeHeadersMsg(resp.Msg.Header); err != nil {
			return nil, fmt.Errorf("leader get of %s: %w", what, err)
		}
	}
	return &jetstream.RawStreamMsg{Subject: resp.Msg.Subject, Sequence: resp.Msg.Seq, Header: hdr, Data: resp.Msg.Data, Time: resp.Msg.Time}, nil
}
