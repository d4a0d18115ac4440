package inbox

import (
	"bytes"
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/internal/approvers"
	"github.com/airlock-dev/airlock/producers"
	"github.com/go-webauthn/webauthn/webauthn"
	"github.com/nats-io/nats.go"
)

// Limits and defaults.
const (
	// DefaultIdle is how long a session lasts without a request.
	DefaultIdle = 15 * time.Minute
	// DefaultLife is how long a session lasts at most.
	DefaultLife = 12 * time.Hour
	// MaxBody bounds a request body.
	MaxBody = 64 << 10
	// MaxReason bounds a grant's or deny's reason, in bytes.
	MaxReason = 1024
	// MaxArgsShown bounds the args a hold's page renders; beyond it the
	// page says how much it left out.
	MaxArgsShown = 256 << 10
	// ceremonyTTL bounds a passkey ceremony, begin to finish.
	ceremonyTTL = 5 * time.Minute
	// maxSSE bounds the live streams one process serves at once.
	maxSSE = 256
)

// Error codes the inbox answers with, in JSON ({"code", "message"}) and
// on its pages. docs/inbox.md lists them.
const (
	CodeLoginRequired = "LOGIN_REQUIRED"
	CodeCSRF          = "CSRF_INVALID"
	CodeOrigin        = "ORIGIN_INVALID"
	CodeLinkUsed      = "LINK_INVALID"
	CodeForbidden     = "NOT_AUTHORIZED"
	CodePasskey       = "PASSKEY_INVALID"
	CodeBadRequest    = "BAD_REQUEST"
	CodeNotFound      = "HOLD_NOT_FOUND"
	CodeUnavailable   = "UNAVAILABLE"
	CodeTooMany       = "TOO_MANY_STREAMS"
)

// Config configures the inbox.
type Config struct {
	// Conn is the service's connection: the inbox reads holds and their
	// args and sends resolutions on the approvers' behalf with it; the gate
	// accepts a resolution only with the approver's passkey signature.
	Conn *nats.Conn
	// Store keeps accounts, links and sessions. Required.
	Store *approvers.Store
	// Origin is the inbox's public origin, scheme://host[:port], what
	// browsers see: passkeys are bound to its host, and every
	// state-changing request must come from it. Required.
	Origin string
	// Root says where a workspace's tools run (an exec's working dir).
	Root func(ws string) string
	// Idle and Life bound a session; DefaultIdle and DefaultLife when 0.
	Idle, Life time.Duration
	// Clock; time.Now when nil.
	Clock  func() time.Time
	Logger *slog.Logger
}

// EnsureDefaults fills in what is unset.
func (c *Config) EnsureDefaults() {
	if c.Idle == 0 {
		c.Idle = DefaultIdle
	}
	if c.Life == 0 {
		c.Life = DefaultLife
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Root == nil {
		c.Root = func(string) string { return "" }
	}
}

// Validate checks the config; it changes nothing.
func (c *Config) Validate() error {
	if c.Conn == nil || c.Store == nil {
		return errors.New("inbox: Conn and Store are required")
	}
	if _, err := ParseOrigin(c.Origin); err != nil {
		return err
	}
	if c.Idle < time.Minute || c.Life < c.Idle {
		return fmt.Errorf("inbox: idle timeout %s must be at least 1m and session life %s at least that", c.Idle, c.Life)
	}
	return nil
}

// ParseOrigin checks an origin, scheme://host[:port] with nothing after,
// and returns its host (the passkeys' relying party id). Passkeys need a
// secure context: https, or http on localhost.
func ParseOrigin(origin string) (host string, err error) {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("inbox: origin %q: want scheme://host[:port] and nothing after, such as https://inbox.example.com", origin)
	}
	if origin != strings.ToLower(origin) {
		return "", fmt.Errorf("inbox: origin %q: write it in lower case, as browsers send it", origin)
	}
	host = u.Hostname()
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && (host == "localhost" || strings.HasSuffix(host, ".localhost")):
	default:
		return "", fmt.Errorf("inbox: origin %q: passkeys work only on https, or http on localhost; put the inbox behind TLS and give --ui-origin https://...", origin)
	}
	if net.ParseIP(host) != nil {
		return "", fmt.Errorf("inbox: origin %q: a passkey's relying party is a domain name, not an IP address; use localhost or a name", origin)
	}
	return host, nil
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Server is the inbox's HTTP handler.
type Server struct {
	cfg  Config
	rpID string
	wa   *webauthn.WebAuthn
	mac  []byte
	tmpl *template.Template
	mux  *http.ServeMux
	sse  chan struct{}
	q    *producers.Client
	// streams counts each approver's live streams.
	streams streamCount
}

// New makes the inbox.
func New(ctx context.Context, cfg Config) (*Server, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	host, _ := ParseOrigin(cfg.Origin)
	wa, err := webauthn.New(&webauthn.Config{
		RPID: host, RPDisplayName: "Airlock", RPOrigins: []string{cfg.Origin},
	})
	if err != nil {
		return nil, fmt.Errorf("inbox: passkeys: %w", err)
	}
	mac, err := cfg.Store.MACKey(ctx)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	tmpl, err := template.New("").Funcs(funcs(cfg.Clock)).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	q, err := producers.New(cfg.Conn)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	s := &Server{cfg: cfg, rpID: host, wa: wa, mac: mac, tmpl: tmpl, mux: http.NewServeMux(), sse: make(chan struct{}, maxSSE), q: q}
	static, _ := fs.Sub(staticFS, "static")
	files := http.StripPrefix("/static/", http.FileServerFS(static))
	s.mux.Handle("GET /static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r) // no listings
			return
		}
		files.ServeHTTP(w, r)
	}))
	s.mux.HandleFunc("GET /{$}", s.authed(s.handleInbox))
	s.mux.HandleFunc("GET /history", s.authed(s.handleHistory))
	s.mux.HandleFunc("GET /holds/{hold}", s.authed(s.handleHold))
	s.mux.HandleFunc("POST /holds/{hold}/statement", s.authed(s.handleStatement))
	s.mux.HandleFunc("POST /holds/{hold}/resolve", s.authed(s.handleResolve))
	s.mux.HandleFunc("GET /events", s.authed(s.handleEvents))
	s.mux.HandleFunc("GET /l/{token}", s.handleLink)
	s.mux.HandleFunc("GET /login", s.handleLoginPage)
	s.mux.HandleFunc("POST /login/begin", s.handleLoginBegin)
	s.mux.HandleFunc("POST /login/finish", s.handleLoginFinish)
	s.mux.HandleFunc("POST /logout", s.authed(s.handleLogout))
	s.mux.HandleFunc("GET /enroll/{token}", s.handleEnrollPage)
	s.mux.HandleFunc("POST /enroll/{token}/begin", s.handleEnrollBegin)
	s.mux.HandleFunc("POST /enroll/{token}/finish", s.handleEnrollFinish)
	return s, nil
}

// ServeHTTP sets the headers every answer carries and routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer") // links carry tokens
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	if r.Method == http.MethodPost {
		if err := s.checkOrigin(r); err != nil {
			s.fail(w, r, http.StatusForbidden, CodeOrigin, err.Error())
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
	}
	s.mux.ServeHTTP(w, r)
}

// checkOrigin refuses a state-changing request from another origin.
func (s *Server) checkOrigin(r *http.Request) error {
	o := r.Header.Get("Origin")
	if o == "" {
		return errors.New("the request has no Origin header; a browser sends one: use the inbox's page")
	}
	if o != s.cfg.Origin {
		return fmt.Errorf("the request comes from %s, not the inbox's origin %s", o, s.cfg.Origin)
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return fmt.Errorf("the request is %s, not same-origin", site)
	}
	return nil
}

const (
	sessionCookie  = "airlock_session"
	ceremonyCookie = "airlock_ceremony"
)

// session is a request's logged-in approver.
type session struct {
	token   string
	s       *approvers.Session
	account *approvers.Account
}

type ctxKey struct{}

// authed requires a live session, within the idle timeout, of an
// account that still exists; POSTs need its CSRF token too.
func (s *Server) authed(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sess, refresh, err := s.session(r)
		if err != nil {
			if r.Method == http.MethodGet && !strings.HasPrefix(r.URL.Path, "/events") && !strings.Contains(r.Header.Get("Accept"), "application/json") {
				http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			s.fail(w, r, http.StatusUnauthorized, CodeLoginRequired, err.Error())
			return
		}
		if r.Method == http.MethodPost {
			got := r.Header.Get("X-Airlock-CSRF")
			if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(sess.s.CSRF)) != 1 {
				s.fail(w, r, http.StatusForbidden, CodeCSRF, "the request's CSRF token is not this session's: reload the page and try again")
				return
			}
		}
		if refresh {
			s.setSession(w, sess.token)
		}
		h(w, r, sess)
	}
}

// session reads the request's session cookie: MAC'd token and the time
// of the last request; refresh says the cookie's time should move on.
func (s *Server) session(r *http.Request) (*session, bool, error) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil, false, errors.New("log in with your passkey")
	}
	v, ok := approvers.Unmark(s.mac, sessionCookie, c.Value)
	if !ok {
		return nil, false, errors.New("the session cookie is not one this inbox made: log in again")
	}
	token, seen, ok := strings.Cut(v, ".")
	sec, err := strconv.ParseInt(seen, 10, 64)
	if !ok || err != nil {
		return nil, false, errors.New("the session cookie is malformed: log in again")
	}
	now := s.cfg.Clock()
	last := time.Unix(sec, 0)
	if now.Sub(last) > s.cfg.Idle {
		return nil, false, fmt.Errorf("the session was idle for more than %s: log in again", s.cfg.Idle)
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	st, err := s.cfg.Store.Session(ctx, token)
	if err != nil {
		return nil, false, errors.New("the session ended: log in again")
	}
	a, _, err := s.cfg.Store.Account(ctx, st.Approver)
	if err != nil || !bytes.Equal(a.Handle, st.Handle) {
		return nil, false, fmt.Errorf("no approver %s any more (removed, or made again since): ask an operator", st.Approver)
	}
	// What the page fetches by itself (live reloads, the event stream)
	// does not count as the approver's activity.
	background := r.Header.Get("X-Airlock-Background") != "" || r.URL.Path == "/events"
	return &session{token: token, s: st, account: a}, !background && now.Sub(last) > 30*time.Second, nil
}

func (s *Server) setSession(w http.ResponseWriter, token string) {
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: approvers.Mark(s.mac, sessionCookie, token+"."+approvers.Unix(s.cfg.Clock())),
		Path: "/", HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode,
		MaxAge: int(s.cfg.Life / time.Second),
	})
}

func (s *Server) clearCookie(w http.ResponseWriter, name string) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: "/", HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
}

// apiError is the JSON body of a refusal.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// fail answers a refusal: JSON to a script, a page to a browser.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	if r.Method == http.MethodPost || strings.Contains(r.Header.Get("Accept"), "application/json") {
		writeJSON(w, status, apiError{Code: code, Message: msg})
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	s.render(w, "error.html", map[string]any{"Title": http.StatusText(status), "Code": code, "Message": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) render(w http.ResponseWriter, name string, data map[string]any) {
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
	}
	if err := s.tmpl.ExecuteTemplate(w, name, data); err != nil {
		s.cfg.Logger.Warn("inbox: render", "page", name, "err", err)
	}
}

func (s *Server) handleLogout(w http.ResponseWriter, r *http.Request, sess *session) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	_ = s.cfg.Store.EndSession(ctx, sess.token)
	s.clearCookie(w, sessionCookie)
	writeJSON(w, http.StatusOK, map[string]string{"next": "/login"})
}

// handleLink uses a hold link once, for a logged-in approver of its
// workspace, and shows the hold.
func (s *Server) handleLink(w http.ResponseWriter, r *http.Request) {
	sess, _, err := s.session(r)
	if err != nil {
		http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.Path), http.StatusSeeOther)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	l, err := s.cfg.Store.UseLink(ctx, r.PathValue("token"), func(l *approvers.Link) error {
		if !sess.account.Can(l.Workspace) {
			return errNotYours
		}
		return nil
	})
	switch {
	case errors.Is(err, approvers.ErrUsed):
		s.fail(w, r, http.StatusGone, CodeLinkUsed, "this link was used already, has expired, or is not one this inbox made: open the inbox to find the hold")
		return
	case errors.Is(err, errNotYours):
		s.fail(w, r, http.StatusForbidden, CodeForbidden, "this link is to a hold of a workspace "+sess.account.Name+" does not approve in: it is for another approver")
		return
	case err != nil:
		s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, err.Error())
		return
	}
	http.Redirect(w, r, "/holds/"+url.PathEscape(l.HoldID), http.StatusSeeOther)
}

// errNotYours: a link to a hold of a workspace the approver does not
// approve in.
var errNotYours = errors.New("inbox: not the approver's workspace")

// Handler wraps the server for an http.Server, with nothing else.
func (s *Server) Handler() http.Handler { return s }

// Close releases the server's client.
func (s *Server) Close() error { return s.q.Close() }
