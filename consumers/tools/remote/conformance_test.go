package remote_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/consumers/executor/conformance"
	"github.com/airlock-dev/airlock/consumers/tools/remote"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
)

// remote's effect is counted by the tool server, per op. The server keeps
// the contract of docs/remote.md, so a new attempt of a completed op gets
// the recorded result (it replays), and a lost attempt that never ran is
// fenced and rerun. A cancelled call leaves the server running it, so
// Recover answers Ambiguous, never Done.
func TestConformance(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	srv, err := nats.Connect(n.Server.ClientURL())
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	var subjects atomic.Int64

	const frame = len(`{"pad":""}`)
	conformance.Run(t, conformance.Harness{
		New: func(t *testing.T) conformance.Fixture {
			subject := fmt.Sprintf("tools.conformance.s%d", subjects.Add(1))
			ts := startToolServer(t, srv, subject)
			r, err := remote.New(remote.Config{Conn: n.Conn, Tool: "conf", Subject: subject,
				Timeout: 2 * time.Second, StatusTimeout: time.Second})
			require.NoError(t, err)
			return conformance.Fixture{
				Executor: r,
				Call: func(i int) executor.Call {
					return executor.Call{OpID: conformance.OpID(), Workspace: "w", Agent: "bot", Args: fmt.Appendf(nil, `{"i":%d}`, i)}
				},
				Slow: func(i int) executor.Call {
					return executor.Call{OpID: conformance.OpID(), Workspace: "w", Agent: "bot", Args: fmt.Appendf(nil, `{"i":%d,"slow":true}`, i)}
				},
				Effects: ts.effects,
			}
		},
		// Its records are shared by every instance.
		RecoversElsewhere: true,
		Repeat:            conformance.RepeatReplays,
		Bad: []conformance.Bad{
			{Name: "server refuses the args", Call: conformance.Args(`{"x":1}`), Code: events.CodeInvalidArgs},
			{Name: "server says the args are too large", Call: conformance.Args(`{"fail":"ARGS_TOO_LARGE"}`), Code: events.CodeArgsTooLarge},
			{Name: "server refuses with a code of its own", Call: conformance.Args(`{"fail":"QUOTA_EXCEEDED"}`), Code: events.CodeExecutorFailed},
		},
		Limits: []conformance.Limit{
			{Name: "server result at MaxResultBytes", Call: conformance.Args(fmt.Sprintf(`{"i":0,"pad":%d}`, events.MaxResultBytes-frame))},
			{Name: "server result over MaxResultBytes", Call: conformance.Args(fmt.Sprintf(`{"i":0,"pad":%d}`, events.MaxResultBytes+1))},
		},
	})
}

// toolServer is an in-memory tool server that keeps the server's
// contract of docs/remote.md: one run per op id, the outcome replayed to
// every later call, never answered only for an op no attempt of which
// started and then fenced, an error only for a call that had no effect.
//
// Args: {"i": N} returns {"i": N}; "slow": true holds the call until the
// test ends; "pad": K returns {"pad": "<K x>"} instead; {"fail": CODE}
// refuses with CODE; anything else is INVALID_ARGS.
type toolServer struct {
	status string

	mu   sync.Mutex
	ops  map[string]*opRecord
	runs map[string]int // effects by op id

	stop chan struct{} // closed at the end: slow calls end
	wg   sync.WaitGroup
}

type opRecord struct {
	running, done bool
	result        json.RawMessage
	err           *remote.Error
	fenced        []string
}

func startToolServer(t *testing.T, nc *nats.Conn, subject string) *toolServer {
	s := &toolServer{status: subject + remote.StatusSuffix, ops: map[string]*opRecord{}, runs: map[string]int{}, stop: make(chan struct{})}
	msgs := make(chan *nats.Msg, 64)
	var subs []*nats.Subscription
	for _, subj := range []string{subject, s.status} {
		sub, err := nc.ChanSubscribe(subj, msgs)
		require.NoError(t, err)
		subs = append(subs, sub)
	}
	require.NoError(t, nc.Flush())
	s.wg.Go(func() {
		for {
			select {
			case <-s.stop:
				return
			case m := <-msgs:
				s.wg.Go(func() { s.handle(m) })
			}
		}
	})
	t.Cleanup(func() {
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
		close(s.stop)
		s.wg.Wait()
	})
	return s
}

func (s *toolServer) effects(c executor.Call) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[c.OpID]
}

func (s *toolServer) handle(m *nats.Msg) {
	var reply any
	if m.Subject == s.status {
		reply = s.answerStatus(m.Data)
	} else if reply = s.call(m.Data); reply == nil {
		return
	}
	body, err := json.Marshal(reply)
	if err != nil {
		panic(err)
	}
	_ = m.Respond(body) // the caller may be gone
}

// record returns op's record, creating it; s.mu is held.
func (s *toolServer) record(op string) *opRecord {
	rec := s.ops[op]
	if rec == nil {
		rec = &opRecord{}
		s.ops[op] = rec
	}
	return rec
}

// call runs a call once per op id; nil means no reply (the op is running).
func (s *toolServer) call(data []byte) *remote.Reply {
	var req remote.Request
	if err := json.Unmarshal(data, &req); err != nil || req.V != remote.Version || req.OpID == "" || req.Attempt == "" {
		return &remote.Reply{V: remote.Version, Error: &remote.Error{Code: "INVALID_REQUEST"}}
	}
	s.mu.Lock()
	rec := s.record(req.OpID)
	switch {
	case rec.done:
		s.mu.Unlock()
		return &remote.Reply{V: remote.Version, Result: rec.result, Error: rec.err}
	case rec.running:
		s.mu.Unlock()
		return nil
	case slices.Contains(rec.fenced, req.Attempt):
		s.mu.Unlock()
		return &remote.Reply{V: remote.Version, Error: &remote.Error{Code: "FENCED", Message: "answered never"}}
	}
	a, refusal := parseConfArgs(req.Args)
	if refusal != nil {
		rec.done, rec.err = true, refusal
		s.mu.Unlock()
		return &remote.Reply{V: remote.Version, Error: refusal}
	}
	rec.running = true
	s.runs[req.OpID]++
	s.mu.Unlock()

	if a.Slow {
		<-s.stop
	}
	result := fmt.Appendf(nil, `{"i":%d}`, *a.I)
	if a.Pad > 0 {
		result = []byte(`{"pad":"` + strings.Repeat("x", a.Pad) + `"}`)
	}
	s.mu.Lock()
	rec.running, rec.done, rec.result = false, true, result
	s.mu.Unlock()
	return &remote.Reply{V: remote.Version, Result: result}
}

// answerStatus answers a status query, fencing the attempt asked about
// when no attempt of the op has started.
func (s *toolServer) answerStatus(data []byte) remote.StatusReply {
	var q remote.StatusRequest
	if err := json.Unmarshal(data, &q); err != nil || q.V != remote.Version || q.OpID == "" || q.Attempt == "" {
		return remote.StatusReply{V: remote.Version, Error: &remote.Error{Code: "INVALID_REQUEST"}}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.record(q.OpID)
	switch {
	case rec.done:
		return remote.StatusReply{V: remote.Version, State: remote.StateDone, Result: rec.result, Error: rec.err}
	case rec.running:
		return remote.StatusReply{V: remote.Version, State: remote.StateRunning}
	}
	if !slices.Contains(rec.fenced, q.Attempt) {
		rec.fenced = append(rec.fenced, q.Attempt)
	}
	return remote.StatusReply{V: remote.Version, State: remote.StateNever}
}

type confArgs struct {
	I    *int   `json:"i"`
	Slow bool   `json:"slow"`
	Pad  int    `json:"pad"`
	Fail string `json:"fail"`
}

// parseConfArgs reads the args, or says why the call is refused.
func parseConfArgs(raw json.RawMessage) (confArgs, *remote.Error) {
	var a confArgs
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	switch err := dec.Decode(&a); {
	case err != nil:
		return a, &remote.Error{Code: "INVALID_ARGS", Message: err.Error()}
	case a.Fail != "":
		return a, &remote.Error{Code: a.Fail, Message: "refused as asked"}
	case a.I == nil:
		return a, &remote.Error{Code: "INVALID_ARGS", Message: `"i" is required`}
	}
	return a, nil
}
