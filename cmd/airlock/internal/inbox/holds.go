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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/producers"
	"github.com/nats-io/nats.go"
)

const queryTimeout = 5 * time.Second

// historyPage is how many of each workspace's newest held ops history
// shows; historyScan bounds the pages of ops it reads to find them.
const (
	historyPage = 100
	historyScan = 10
)

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
		// The newest ops of the workspace, until historyPage of them were
		// held, or historyScan pages were read.
		q, found := events.ListQuery{State: state, Workspace: name, Limit: events.MaxPage, Newest: true}, 0
		for range historyScan {
			page, err := s.q.List(ctx, q)
			if err != nil {
				s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, err.Error())
				return
			}
			for _, op := range page.Ops {
				if op.HoldID != "" && op.State != events.StateHeld && found < historyPage {
					ops, found = append(ops, op), found+1
				}
			}
			if page.Next == "" || found == historyPage {
				break
			}
			q.Cursor = page.Next
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
	if !s.streams.add(sess.account.Name) {
		s.fail(w, r, http.StatusServiceUnavailable, CodeTooMany, fmt.Sprintf("%s has %d live streams open here, the most one approver may: close a tab", sess.account.Name, maxSSEPerApprover))
		return
	}
	defer s.streams.done(sess.account.Name)
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
	ping := time.NewTicker(ssePing)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-ping.C:
			// The stream lasts as long as its session: signed out, idle,
			// removed or made again, it ends (the page's next request
			// goes to the sign-in).
			if _, _, err := s.session(r); err != nil {
				_, _ = fmt.Fprint(w, "event: ended\ndata: {}\n\n")
				fl.Flush()
				return
			}
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

// ssePing is how often a live stream says it is alive and checks its
// session.
var ssePing = 15 * time.Second

// maxSSEPerApprover bounds one approver's live streams in one process.
const maxSSEPerApprover = 8

// streamCount counts live streams by approver.
type streamCount struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *streamCount) add(who string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	if c.n[who] >= maxSSEPerApprover {
		return false
	}
	c.n[who]++
	return true
}

func (c *streamCount) done(who string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[who]--; c.n[who] <= 0 {
		delete(c.n, who)
	}
}

// View is how a hold's page shows a call: by tool.
type View struct {
	Kind      string // "exec", "patch", "json"
	Argv      []string
	Dir       string
	TimeoutMS int64
	Files     []DiffFile
	JSON      string
	// Cut is how many bytes of the args the page leaves out.
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
	switch tool {
	case "exec":
		var a struct {
			Argv      []string `json:"argv"`
			TimeoutMS int64    `json:"timeout_ms"`
		}
		if json.Unmarshal(args, &a) == nil && len(a.Argv) > 0 {
			v.Kind, v.Dir, v.TimeoutMS = "exec", visible(root), a.TimeoutMS
			if v.Dir == "" {
				v.Dir = "(a new temporary directory)"
			}
			shown := 0
			for i, arg := range a.Argv {
				if shown+len(arg) > MaxArgsShown {
					for _, rest := range a.Argv[i:] {
						v.Cut += len(rest)
					}
					break
				}
				shown += len(arg)
				v.Argv = append(v.Argv, visible(arg))
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
				v.Cut, p = len(p)-MaxArgsShown, strings.ToValidUTF8(p[:MaxArgsShown], "")
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
		v.Cut, out = len(out)-MaxArgsShown, strings.ToValidUTF8(out[:MaxArgsShown], "")
	}
	v.JSON = visibleLines(out)
	return v
}

// diff splits a unified diff into files and classified lines. Inside a
// hunk, lines are read by the hunk's own counts: a line that looks like
// a file header there ("--- x", "+++ x") is a removed or added line, as
// the patch applies it, never a file name an agent could show instead of
// the file it changes.
func diff(patch string) []DiffFile {
	var files []DiffFile
	cur := func() *DiffFile {
		if len(files) == 0 {
			files = append(files, DiffFile{Name: "(patch)"})
		}
		return &files[len(files)-1]
	}
	add := func(kind, text string) { f := cur(); f.Lines = append(f.Lines, DiffLine{kind, visible(text)}) }
	oldLeft, newLeft := 0, 0 // lines the hunk still has, of each side
	headerDone := false      // the current file has had its +++ line
	for _, line := range strings.Split(strings.TrimSuffix(patch, "\n"), "\n") {
		if oldLeft > 0 || newLeft > 0 {
			switch {
			case strings.HasPrefix(line, "+"):
				newLeft--
				add("add", line)
			case strings.HasPrefix(line, "-"):
				oldLeft--
				add("del", line)
			case strings.HasPrefix(line, "\\"):
				add("meta", line) // "\ No newline at end of file"
			default:
				oldLeft--
				newLeft--
				add("", line)
			}
			continue
		}
		switch {
		case strings.HasPrefix(line, "diff --git "):
			files = append(files, DiffFile{Name: visible(strings.TrimPrefix(line, "diff --git "))})
			headerDone = false
			add("meta", line)
		case strings.HasPrefix(line, "--- "):
			if len(files) == 0 || headerDone {
				files = append(files, DiffFile{Name: visible(strings.TrimPrefix(line, "--- "))})
			}
			headerDone = false
			add("meta", line)
		case strings.HasPrefix(line, "+++ "):
			if name := strings.TrimPrefix(strings.TrimPrefix(line, "+++ "), "b/"); name != "/dev/null" {
				cur().Name = visible(name)
			}
			headerDone = true
			add("meta", line)
		case strings.HasPrefix(line, "@@"):
			oldLeft, newLeft = hunkCounts(line)
			headerDone = true
			add("hunk", line)
		default:
			add("meta", line)
		}
	}
	return files
}

// hunkCounts reads "@@ -a[,b] +c[,d] @@": b and d, 1 when absent.
func hunkCounts(line string) (old, new int) {
	f := strings.Fields(line)
	count := func(field, sign string) int {
		if !strings.HasPrefix(field, sign) {
			return 0
		}
		_, n, ok := strings.Cut(field[1:], ",")
		if !ok {
			return 1
		}
		v, err := strconv.Atoi(n)
		if err != nil || v < 0 {
			return 0
		}
		return v
	}
	if len(f) < 3 {
		return 0, 0
	}
	return count(f[1], "-"), count(f[2], "+")
}

// visible shows control and bidirectional formatting characters as
// <U+XXXX>, so that text cannot reorder itself on screen or hide.
func visible(s string) string {
	if !strings.ContainsFunc(s, hidden) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if hidden(r) {
			fmt.Fprintf(&b, "<U+%04X>", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// visibleLines is visible for text of several lines: its line breaks
// stay.
func visibleLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = visible(l)
	}
	return strings.Join(lines, "\n")
}

func hidden(r rune) bool {
	switch {
	case r == '\t':
		return false
	case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0:
		return true
	case r >= 0x200b && r <= 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0xfeff, r == 0x061c:
		return true
	}
	return false
}

func funcs(clock func() time.Time) map[string]any {
	return map[string]any{
		"since": func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			return clock().Sub(t).Round(time.Second).String()
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
	}
}
