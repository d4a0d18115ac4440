package inbox

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/producers"
	"github.com/nats-io/nats.go"
)

const queryTimeout = 5 * time.Second

// historyPage is how many of each workspace's newest ops history reads.
const historyPage = 100

// approver is the session's approver as a client of Airlock: reads go
// through the service's connection, resolutions name the approver.
func (s *Server) approver(sess *session) (*producers.Approver, error) {
	return producers.NewApprover(s.cfg.Conn, sess.account.Name)
}

// pending lists the held ops of the session's workspaces, oldest first.
func (s *Server) pending(ctx context.Context, sess *session) ([]*events.Op, error) {
	var out []*events.Op
	for _, ws := range sess.account.Workspaces {
		ops, err := s.q.ListHolds(ctx, ws)
		if err != nil {
			return nil, err
		}
		out = append(out, ops...)
	}
	sort.SliceStable(out, func(i, j int) bool {
		return out[i].HoldExpiresAt != nil && out[j].HoldExpiresAt != nil && out[i].HoldExpiresAt.Before(*out[j].HoldExpiresAt)
	})
	return out, nil
}

func (s *Server) page(sess *session, title string) map[string]any {
	return map[string]any{"Title": title, "Approver": sess.account.Name, "Workspaces": sess.account.Workspaces, "CSRF": sess.s.CSRF}
}

func (s *Server) handleInbox(w http.ResponseWriter, r *http.Request, sess *session) {
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	ops, err := s.pending(ctx, sess)
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, "the holds could not be read: "+err.Error())
		return
	}
	data := s.page(sess, "Pending holds")
	data["Ops"] = ops
	if r.URL.Query().Get("part") == "list" {
		s.render(w, "holdlist", data)
		return
	}
	s.render(w, "inbox.html", data)
}

// History states, as the filter offers them.
var historyStates = []string{"", "granted", "denied", "expired", "completed", "failed", "ambiguous", "executing"}

func (s *Server) handleHistory(w http.ResponseWriter, r *http.Request, sess *session) {
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	ws, state := r.URL.Query().Get("ws"), r.URL.Query().Get("state")
	if ws != "" && !sess.account.Can(ws) {
		s.fail(w, r, http.StatusForbidden, CodeForbidden, fmt.Sprintf("%s does not approve in workspace %s", sess.account.Name, ws))
		return
	}
	if !slices.Contains(historyStates, state) {
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("state %q: want one of %s", state, strings.Join(historyStates[1:], ", ")))
		return
	}
	wss := sess.account.Workspaces
	if ws != "" {
		wss = []string{ws}
	}
	var ops []*events.Op
	for _, name := range wss {
		page, err := s.q.List(ctx, events.ListQuery{State: state, Workspace: name, Limit: historyPage, Newest: true})
		if err != nil {
			s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, err.Error())
			return
		}
		for _, op := range page.Ops {
			if op.HoldID != "" && op.State != events.StateHeld {
				ops = append(ops, op)
			}
		}
	}
	sort.SliceStable(ops, func(i, j int) bool { return resolvedAt(ops[i]).After(resolvedAt(ops[j])) })
	data := s.page(sess, "History")
	data["Ops"], data["WS"], data["State"], data["States"] = ops, ws, state, historyStates[1:]
	if r.URL.Query().Get("part") == "list" {
		s.render(w, "historylist", data)
		return
	}
	s.render(w, "history.html", data)
}

func resolvedAt(op *events.Op) time.Time {
	if op.ResolvedAt != nil {
		return *op.ResolvedAt
	}
	return time.Time{}
}

// hold reads the hold a request names, if the session may see it.
func (s *Server) hold(ctx context.Context, w http.ResponseWriter, r *http.Request, sess *session) (*events.Op, bool) {
	a, err := s.approver(sess)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, CodeUnavailable, err.Error())
		return nil, false
	}
	op, err := a.Hold(ctx, r.PathValue("hold"))
	var e *events.Error
	switch {
	case errors.As(err, &e) && (e.Code == events.CodeHoldNotFound || e.Code == events.CodeInvalidResolution):
		s.fail(w, r, http.StatusNotFound, CodeNotFound, e.Message)
		return nil, false
	case err != nil:
		s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, err.Error())
		return nil, false
	case !sess.account.Can(op.Workspace):
		// The same answer as for no hold: nothing of another workspace
		// shows, not even that the hold exists.
		s.fail(w, r, http.StatusNotFound, CodeNotFound, "no hold "+r.PathValue("hold")+" in your workspaces")
		return nil, false
	}
	return op, true
}

func (s *Server) handleHold(w http.ResponseWriter, r *http.Request, sess *session) {
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	op, ok := s.hold(ctx, w, r, sess)
	if !ok {
		return
	}
	data := s.page(sess, "Hold "+op.HoldID)
	data["Op"] = op
	data["Pending"] = op.State == events.StateHeld
	if r.URL.Query().Get("part") == "status" {
		s.render(w, "status", data)
		return
	}
	a, _ := s.approver(sess)
	args, digest, err := a.Args(ctx, op)
	switch {
	case err != nil:
		data["ArgsError"] = "the args could not be read: " + err.Error()
	case digest != op.ArgsDigest:
		data["ArgsError"] = fmt.Sprintf("the stored args digest %s is not the hold's %s: do not grant", digest, op.ArgsDigest)
	default:
		data["View"] = view(op.Tool, args, s.cfg.Root(op.Workspace))
	}
	var operands []kv
	for k, v := range op.Operands {
		operands = append(operands, kv{k, v})
	}
	sort.Slice(operands, func(i, j int) bool { return operands[i].K < operands[j].K })
	data["Operands"] = operands
	s.render(w, "hold.html", data)
}

type kv struct{ K, V string }

// statementRequest asks for the statement a grant or deny would sign.
type statementRequest struct {
	Decision events.Decision `json:"decision"`
	Reason   string          `json:"reason"`
}

type statementReply struct {
	Statement events.ApprovalStatement `json:"statement"`
	// Challenge is what the passkey signs: the statement's digest.
	Challenge string   `json:"challenge"`
	RPID      string   `json:"rp_id"`
	Allow     []string `json:"allow"`
}

func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("the body is not the JSON this takes: %v", err)
	}
	return nil
}

func (s *Server) handleStatement(w http.ResponseWriter, r *http.Request, sess *session) {
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	var req statementRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	if req.Decision != events.DecisionGrant && req.Decision != events.DecisionDeny {
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("decision %q: want grant or deny", req.Decision))
		return
	}
	if len(req.Reason) > MaxReason {
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("the reason is %d bytes; at most %d", len(req.Reason), MaxReason))
		return
	}
	op, ok := s.hold(ctx, w, r, sess)
	if !ok {
		return
	}
	st := events.ApprovalStatement{
		V: events.ApprovalVersion, HoldID: op.HoldID, OpID: op.ID, Workspace: op.Workspace, ArgsDigest: op.ArgsDigest,
		OperandsDigest: events.OperandsDigest(op.Operands), Decision: req.Decision, ReasonDigest: events.ReasonDigest(req.Reason),
		PolicyHash: op.PolicyHash, Approver: sess.account.Name, At: events.ApprovalTime(s.cfg.Clock()),
	}
	d, err := st.Digest()
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, CodeUnavailable, err.Error())
		return
	}
	ch, err := events.WebAuthnChallenge(d)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, CodeUnavailable, err.Error())
		return
	}
	rep := statementReply{Statement: st, Challenge: base64.RawURLEncoding.EncodeToString(ch), RPID: s.rpID}
	for _, p := range sess.account.Passkeys {
		rep.Allow = append(rep.Allow, base64.RawURLEncoding.EncodeToString(p.Credential.ID))
	}
	writeJSON(w, http.StatusOK, rep)
}

// resolveRequest is a grant or deny signed by a passkey.
type resolveRequest struct {
	Statement events.ApprovalStatement `json:"statement"`
	Reason    string                   `json:"reason"`
	Assertion assertion                `json:"assertion"`
}

type resolveReply struct {
	State   events.State `json:"state,omitempty"`
	Code    string       `json:"code,omitempty"`
	Message string       `json:"message,omitempty"`
}

func (s *Server) handleResolve(w http.ResponseWriter, r *http.Request, sess *session) {
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	var req resolveRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	op, ok := s.hold(ctx, w, r, sess)
	if !ok {
		return
	}
	st := req.Statement
	if st.HoldID != op.HoldID || st.Approver != sess.account.Name || st.ReasonDigest != events.ReasonDigest(req.Reason) {
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, "the statement is not of this hold, this approver and this reason: ask for a new one")
		return
	}
	ap, err := approval(sess.account, st, req.Assertion)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, CodePasskey, err.Error())
		return
	}
	a, err := s.approver(sess)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, CodeUnavailable, err.Error())
		return
	}
	rep, err := a.ResolveOp(ctx, op, events.Resolution{
		HoldID: op.HoldID, ArgsDigest: st.ArgsDigest, Decision: st.Decision, Reason: req.Reason, Approval: ap,
	})
	var e *events.Error
	switch {
	case errors.As(err, &e):
		status := http.StatusConflict
		if e.Code == events.CodeInvalidSignature || e.Code == events.CodeNotAuthorized {
			status = http.StatusForbidden
		}
		writeJSON(w, status, resolveReply{State: rep.State, Code: string(e.Code), Message: e.Message})
		return
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, resolveReply{Code: CodeUnavailable, Message: err.Error()})
		return
	}
	s.cfg.Logger.Info("inbox: hold resolved", "hold", op.HoldID, "decision", st.Decision, "approver", sess.account.Name)
	writeJSON(w, http.StatusOK, resolveReply{State: rep.State})
}

// handleEvents streams, as server-sent events, a "change" event each time
// an op of the session's workspaces moves: the page then reloads what it
// shows. The events carry the op id and its new event type, nothing else.
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request, sess *session) {
	select {
	case s.sse <- struct{}{}:
		defer func() { <-s.sse }()
	default:
		s.fail(w, r, http.StatusServiceUnavailable, CodeTooMany, fmt.Sprintf("the inbox serves %d live streams at most; the page retries", maxSSE))
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		s.fail(w, r, http.StatusInternalServerError, CodeUnavailable, "streaming unsupported")
		return
	}
	ch := make(chan *nats.Msg, 256)
	var subs []*nats.Subscription
	defer func() {
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
	}()
	for _, ws := range sess.account.Workspaces {
		sub, err := s.cfg.Conn.ChanSubscribe(events.LiveSubject(events.SubjectRoot+".op."+ws+".>"), ch)
		if err != nil {
			s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, err.Error())
			return
		}
		subs = append(subs, sub)
	}
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	_, err := producers.EnsureLive(ctx, s.cfg.Conn)
	cancel()
	if err != nil {
		s.cfg.Logger.Warn("inbox: live feed", "err", err)
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprint(w, "retry: 3000\n\n")
	fl.Flush()
	ping := time.NewTicker(20 * time.Second)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-ping.C:
			_, _ = fmt.Fprint(w, ": ping\n\n")
		case m := <-ch:
			ws, op, _, typ, ok := events.OpSubjectParts(events.SubjectRoot + "." + strings.TrimPrefix(m.Subject, events.LivePrefix))
			if !ok || !sess.account.Can(ws) {
				continue
			}
			b, _ := json.Marshal(map[string]string{"op_id": op, "type": typ})
			_, _ = fmt.Fprintf(w, "event: change\ndata: %s\n\n", b)
		}
		fl.Flush()
	}
}

// View is how a hold's page shows a call: by tool.
type View struct {
	Kind  string // "exec", "patch", "json"
	Argv  []string
	Dir   string
	Files []DiffFile
	JSON  string
	// Cut says the args were longer than the page shows.
	Cut int
}

// DiffFile is one file of a unified diff.
type DiffFile struct {
	Name  string
	Lines []DiffLine
}

// DiffLine is one line of a diff, with its kind for colour: "add",
// "del", "hunk", "meta" or "".
type DiffLine struct {
	Kind, Text string
}

func view(tool string, args json.RawMessage, root string) View {
	v := View{Kind: "json"}
	if len(args) > MaxArgsShown {
		v.Cut = len(args) - MaxArgsShown
	}
	switch tool {
	case "exec":
		var a struct {
			Argv      []string `json:"argv"`
			TimeoutMS int64    `json:"timeout_ms"`
		}
		if json.Unmarshal(args, &a) == nil && len(a.Argv) > 0 {
			v.Kind, v.Argv, v.Dir = "exec", a.Argv, root
			if v.Dir == "" {
				v.Dir = "(a new temporary directory)"
			}
			return v
		}
	case "apply_patch":
		var a struct {
			Patch string `json:"patch"`
		}
		if json.Unmarshal(args, &a) == nil && a.Patch != "" {
			p := a.Patch
			if len(p) > MaxArgsShown {
				p = p[:MaxArgsShown]
			}
			v.Kind, v.Files = "patch", diff(p)
			return v
		}
	}
	var buf bytes.Buffer
	if json.Indent(&buf, args, "", "  ") != nil {
		buf.Reset()
		buf.Write(args)
	}
	out := buf.String()
	if len(out) > MaxArgsShown {
		out = out[:MaxArgsShown]
	}
	v.JSON = out
	return v
}

// diff splits a unified diff into files and classified lines.
func diff(patch string) []DiffFile {
	var files []DiffFile
	cur := func() *DiffFile {
		if len(files) == 0 {
			files = append(files, DiffFile{Name: "(patch)"})
		}
		return &files[len(files)-1]
	}
	for _, line := range strings.Split(strings.TrimSuffix(patch, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "diff --git "):
			files = append(files, DiffFile{Name: strings.TrimPrefix(line, "diff --git ")})
			cur().Lines = append(cur().Lines, DiffLine{"meta", line})
		case strings.HasPrefix(line, "--- "):
			if len(files) == 0 || len(cur().Lines) > 1 && cur().Lines[len(cur().Lines)-1].Kind != "meta" {
				files = append(files, DiffFile{Name: strings.TrimPrefix(line, "--- ")})
			}
			cur().Lines = append(cur().Lines, DiffLine{"meta", line})
		case strings.HasPrefix(line, "+++ "):
			f := cur()
			if name := strings.TrimPrefix(strings.TrimPrefix(line, "+++ "), "b/"); name != "/dev/null" {
				f.Name = name
			}
			f.Lines = append(f.Lines, DiffLine{"meta", line})
		case strings.HasPrefix(line, "@@"):
			cur().Lines = append(cur().Lines, DiffLine{"hunk", line})
		case strings.HasPrefix(line, "+"):
			cur().Lines = append(cur().Lines, DiffLine{"add", line})
		case strings.HasPrefix(line, "-"):
			cur().Lines = append(cur().Lines, DiffLine{"del", line})
		default:
			cur().Lines = append(cur().Lines, DiffLine{"", line})
		}
	}
	return files
}

func funcs(clock func() time.Time) map[string]any {
	return map[string]any{
		"ago": func(t *time.Time) string {
			if t == nil {
				return ""
			}
			return clock().Sub(*t).Round(time.Second).String()
		},
		"until": func(t *time.Time) string {
			if t == nil {
				return ""
			}
			d := t.Sub(clock()).Round(time.Second)
			if d <= 0 {
				return "expired"
			}
			return d.String()
		},
		"rfc3339": func(t *time.Time) string {
			if t == nil {
				return ""
			}
			return t.UTC().Format(time.RFC3339)
		},
		"short": func(s string) string {
			if len(s) > 19 {
				return s[:19] + "…"
			}
			return s
		},
	}
}
