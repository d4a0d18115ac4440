package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlock-dev/airlock/consumers/tools/remote"
	"github.com/nats-io/nats.go"
)

// Record states.
const (
	// fenced: no attempt ran; the status query answered never for the
	// attempts in Fenced, which are refused from then on.
	fenced = "fenced"
	// started: an attempt began; written (and synced) before the effect.
	// Seen after a restart, it means the server stopped mid-call and
	// cannot tell whether the line was appended.
	started = "started"
	// done: the outcome is recorded and every later call replays it.
	done = "done"
)

// maxLine bounds the line a call may append.
const maxLine = 4096

// record is what the server keeps of one op, by op id.
type record struct {
	State   string          `json:"state"`
	Attempt string          `json:"attempt,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *remote.Error   `json:"error,omitempty"`
	Fenced  []string        `json:"fenced,omitempty"`
}

// stateFile is the layout of the --state file.
type stateFile struct {
	V   int                `json:"v"`
	Ops map[string]*record `json:"ops"`
}

// server is the tool "append a line to a file": args {"line": "..."},
// result {"lines": N}, the file's line count after the append. It handles
// one message at a time, so it needs no lock, and it writes its records to
// statePath (synced) before it answers.
type server struct {
	statePath string
	out       string
	log       *slog.Logger
	ops       map[string]*record
}

// open loads the records of statePath (none if it does not exist yet).
func open(statePath, out string, log *slog.Logger) (*server, error) {
	s := &server{statePath: statePath, out: out, log: log, ops: map[string]*record{}}
	data, err := os.ReadFile(statePath)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	} else if err != nil {
		return nil, err
	}
	var f stateFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("state %s: %w", statePath, err)
	}
	if f.Ops != nil {
		s.ops = f.Ops
	}
	return s, nil
}

// listener holds the server's two subscriptions.
type listener struct {
	s              *server
	calls, queries chan *nats.Msg
	subs           []*nats.Subscription
}

// listen subscribes to subject (calls) and its status subject (queries);
// the server answers once run runs.
func (s *server) listen(nc *nats.Conn, subject string) (*listener, error) {
	l := &listener{s: s, calls: make(chan *nats.Msg, 256), queries: make(chan *nats.Msg, 256)}
	for subj, ch := range map[string]chan *nats.Msg{subject: l.calls, subject + remote.StatusSuffix: l.queries} {
		sub, err := nc.ChanSubscribe(subj, ch)
		if err != nil {
			l.close()
			return nil, fmt.Errorf("subscribe %s: %w", subj, err)
		}
		l.subs = append(l.subs, sub)
	}
	if err := nc.Flush(); err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

// run answers calls and queries, one at a time, until ctx ends.
func (l *listener) run(ctx context.Context) error {
	defer l.close()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-l.calls:
			respond(m, l.s.call(m.Data))
		case m := <-l.queries:
			respond(m, l.s.status(m.Data))
		}
	}
}

func (l *listener) close() {
	for _, sub := range l.subs {
		_ = sub.Unsubscribe()
	}
}

func respond(m *nats.Msg, v any) {
	body, err := json.Marshal(v)
	if err == nil && m.Reply != "" {
		err = m.Respond(body)
	}
	if err != nil {
		slog.Default().Warn("respond", "subject", m.Subject, "err", err)
	}
}

// refuse is an error reply for a call that did not run.
func refuse(code, format string, args ...any) remote.Reply {
	return remote.Reply{V: remote.Version, Error: &remote.Error{Code: code, Message: fmt.Sprintf(format, args...)}}
}

// call runs a call once per op id: a known op gets its recorded outcome.
func (s *server) call(data []byte) remote.Reply {
	var req remote.Request
	if err := json.Unmarshal(data, &req); err != nil {
		return refuse("INVALID_REQUEST", "not a JSON call: %v", err)
	}
	if req.V != remote.Version {
		return refuse("UNSUPPORTED_VERSION", "protocol version %d; this server speaks %d", req.V, remote.Version)
	}
	if req.OpID == "" || req.Attempt == "" {
		return refuse("INVALID_REQUEST", "op_id and attempt are required")
	}
	log := s.log.With("op", req.OpID, "attempt", req.Attempt)
	rec := s.ops[req.OpID]
	switch {
	case rec == nil:
		rec = &record{State: fenced}
	case rec.State == done:
		log.Info("replayed")
		return remote.Reply{V: remote.Version, Result: rec.Result, Error: rec.Error}
	case rec.State == started:
		return refuse("EXECUTION_AMBIGUOUS", "attempt %s started before the server stopped; whether its line was appended is unknown", rec.Attempt)
	case slices.Contains(rec.Fenced, req.Attempt):
		return refuse("FENCED", "attempt %s was answered never by a status query; it does not run", req.Attempt)
	}

	line, err := parseArgs(req.Args)
	if err != nil {
		return s.finish(log, req.OpID, rec, nil, &remote.Error{Code: "INVALID_ARGS", Message: err.Error()})
	}
	rec.State, rec.Attempt = started, req.Attempt
	s.ops[req.OpID] = rec
	if err := s.save(); err != nil {
		rec.State, rec.Attempt = fenced, ""
		return refuse("STATE_UNWRITABLE", "recording the start: %v; nothing appended", err)
	}
	n, err := appendLine(s.out, line)
	if errors.Is(err, errNotWritten) {
		return s.finish(log, req.OpID, rec, nil, &remote.Error{Code: "OUTPUT_UNAVAILABLE", Message: err.Error()})
	} else if err != nil {
		return s.finish(log, req.OpID, rec, nil, &remote.Error{Code: "EXECUTION_AMBIGUOUS", Message: err.Error()})
	}
	return s.finish(log, req.OpID, rec, fmt.Appendf(nil, `{"lines":%d}`, n), nil)
}

// finish records an outcome and returns it as the reply. If the record
// cannot be saved the reply still goes out: a restart then finds the op
// started and says it cannot tell.
func (s *server) finish(log *slog.Logger, op string, rec *record, result json.RawMessage, e *remote.Error) remote.Reply {
	rec.State, rec.Result, rec.Error = done, result, e
	s.ops[op] = rec
	if err := s.save(); err != nil {
		log.Error("recording the outcome", "err", err)
	}
	log.Info("ran", "result", string(result), "error", e)
	return remote.Reply{V: remote.Version, Result: result, Error: e}
}

// status answers a status query. Answering never fences the attempt: the
// fence is saved before the answer goes out.
func (s *server) status(data []byte) remote.StatusReply {
	var q remote.StatusRequest
	if err := json.Unmarshal(data, &q); err != nil {
		return remote.StatusReply{V: remote.Version, Error: &remote.Error{Code: "INVALID_REQUEST", Message: err.Error()}}
	}
	if q.V != remote.Version || q.OpID == "" || q.Attempt == "" {
		return remote.StatusReply{V: remote.Version, Error: &remote.Error{Code: "INVALID_REQUEST", Message: "need v 1, op_id and attempt"}}
	}
	rec := s.ops[q.OpID]
	switch {
	case rec == nil || rec.State == fenced:
		if rec == nil {
			rec = &record{State: fenced}
			s.ops[q.OpID] = rec
		}
		if !slices.Contains(rec.Fenced, q.Attempt) {
			rec.Fenced = append(rec.Fenced, q.Attempt)
			if err := s.save(); err != nil {
				// The fence holds in memory, but a restart would forget it:
				// promise nothing.
				s.log.Error("recording a fence", "op", q.OpID, "err", err)
				return remote.StatusReply{V: remote.Version, State: remote.StateUnknown}
			}
		}
		return remote.StatusReply{V: remote.Version, State: remote.StateNever}
	case rec.State == started:
		// One message at a time: a started record is left from a run
		// that stopped mid-call.
		return remote.StatusReply{V: remote.Version, State: remote.StateUnknown}
	}
	return remote.StatusReply{V: remote.Version, State: remote.StateDone, Result: rec.Result, Error: rec.Error}
}

// parseArgs reads {"line": "..."}.
func parseArgs(args json.RawMessage) (string, error) {
	var a struct {
		Line *string `json:"line"`
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil || a.Line == nil {
		return "", errors.New(`args must be {"line": "<text>"}`)
	}
	if strings.ContainsAny(*a.Line, "\r\n") || len(*a.Line) > maxLine {
		return "", fmt.Errorf("line must be one line of at most %d bytes", maxLine)
	}
	return *a.Line, nil
}

// errNotWritten marks an append that failed before writing anything.
var errNotWritten = errors.New("nothing written")

// appendLine appends line to path, syncs it and returns its line count.
func appendLine(path, line string) (int, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errNotWritten, err)
	}
	_, err = f.WriteString(line + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("appending to %s: %w", path, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("appended to %s, then counting lines: %w", path, err)
	}
	return bytes.Count(data, []byte("\n")), nil
}

// save writes every record to statePath: a synced temporary file renamed
// over it, and the directory synced.
func (s *server) save() error {
	data, err := json.MarshalIndent(stateFile{V: 1, Ops: s.ops}, "", "  ")
	if err != nil {
		return err
	}
	tmp := s.statePath + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.statePath)
	}
	if err != nil {
		return err
	}
	dir, err := os.Open(filepath.Dir(s.statePath))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}
