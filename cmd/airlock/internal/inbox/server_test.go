package inbox

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/approvers"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clock is a settable time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type fixture struct {
	t      *testing.T
	srv    *httptest.Server
	st     *approvers.Store
	clock  *clock
	mac    []byte
	origin string
}

// newFixture is an inbox on a real NATS, whose clock the test moves.
// The store keeps real time (its TTLs are the server's); the inbox's
// idle and life checks use the fixture's clock.
func newFixture(t *testing.T) *fixture {
	n := testenv.StartNATS(t, streams.Config{})
	st, err := approvers.Open(context.Background(), n.JetStream, nil)
	require.NoError(t, err)
	c := &clock{t: time.Now()}
	const origin = "http://localhost:8443"
	s, err := New(context.Background(), Config{Conn: n.Conn, Store: st, Origin: origin, Clock: c.now})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	mac, err := st.MACKey(context.Background())
	require.NoError(t, err)
	return &fixture{t: t, srv: srv, st: st, clock: c, mac: mac, origin: origin}
}

// signIn makes ann (or the account given) a session, as a sign-in would,
// and returns its cookie and CSRF token.
func (f *fixture) signIn(a *approvers.Account) (cookie, csrf string) {
	tok, sess, err := f.st.NewSession(context.Background(), a, DefaultLife)
	require.NoError(f.t, err)
	return approvers.Mark(f.mac, sessionCookie, tok+"."+approvers.Unix(f.clock.now())), sess.CSRF
}

func (f *fixture) post(path, cookie, csrf, body string) (int, string, string) {
	f.t.Helper()
	req, err := http.NewRequest("POST", f.srv.URL+path, strings.NewReader(body))
	require.NoError(f.t, err)
	req.Header.Set("Origin", f.origin)
	req.Header.Set("X-Airlock-CSRF", csrf)
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	resp, err := f.srv.Client().Do(req)
	require.NoError(f.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e apiError
	_ = json.Unmarshal(b, &e)
	var set []string
	for _, c := range resp.Cookies() {
		set = append(set, c.Name+"="+c.Value)
	}
	return resp.StatusCode, e.Code + " " + e.Message, strings.Join(set, "; ")
}

func (f *fixture) account(name string) *approvers.Account {
	a, _, err := f.st.Add(context.Background(), name, []string{"prod"}, time.Hour)
	require.NoError(f.t, err)
	return a
}

// A session ends after the idle timeout without a request; a request in
// time moves the idle clock on. (Its life's end is the bucket's TTL, in
// TestSessionsAndMarks.)
func TestSessionIdle(t *testing.T) {
	f := newFixture(t)
	ann := f.account("ann")
	cookie, csrf := f.signIn(ann)
	f.clock.add(DefaultIdle - time.Minute)
	status, _, set := f.post("/logout", sessionCookie+"="+cookie, "wrong", "{}")
	assert.Equal(t, http.StatusForbidden, status, "a live session with a wrong CSRF token")
	assert.Empty(t, set)

	// A request made in time gives a cookie whose idle clock starts now.
	f.clock.add(2 * time.Minute)
	status, msg, _ := f.post("/logout", sessionCookie+"="+cookie, csrf, "{}")
	assert.Equal(t, http.StatusUnauthorized, status, "idle for longer than the timeout")
	assert.Contains(t, msg, "idle for more than")

	cookie, csrf = f.signIn(ann)
	for range 3 {
		f.clock.add(DefaultIdle - time.Minute)
		req, _ := http.NewRequest("GET", f.srv.URL+"/holds/hold_00000000000000000000000000000000", nil)
		req.Header.Set("Cookie", sessionCookie+"="+cookie)
		req.Header.Set("Accept", "application/json")
		resp, err := f.srv.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.NotEqual(t, http.StatusUnauthorized, resp.StatusCode, "a session in use")
		for _, c := range resp.Cookies() {
			if c.Name == sessionCookie {
				cookie = c.Value
			}
		}
	}
	status, _, _ = f.post("/logout", sessionCookie+"="+cookie, csrf, "{}")
	assert.Equal(t, http.StatusOK, status, "a session kept alive by use")
	status, _, _ = f.post("/logout", sessionCookie+"="+cookie, csrf, "{}")
	assert.Equal(t, http.StatusUnauthorized, status, "a session signed out")

	// A forged idle clock does not pass the MAC.
	cookie, csrf = f.signIn(ann)
	tok, _, _ := strings.Cut(cookie, ".")
	status, _, _ = f.post("/logout", sessionCookie+"="+tok+"."+approvers.Unix(f.clock.now().Add(time.Hour))+".AAAA", csrf, "{}")
	assert.Equal(t, http.StatusUnauthorized, status)
}

// Removing an approver ends its sessions, and making it again does not
// bring them, or its enrollment links, back.
func TestRemovedApproverComesNotBack(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	ann := f.account("ann")
	_, link, err := f.st.Add(ctx, "ann", []string{"prod"}, time.Hour)
	require.NoError(t, err)
	cookie, csrf := f.signIn(ann)
	require.NoError(t, f.st.Remove(ctx, "ann"))
	f.account("ann")
	status, msg, _ := f.post("/logout", sessionCookie+"="+cookie, csrf, "{}")
	assert.Equal(t, http.StatusUnauthorized, status, "an old session of an account made again")
	assert.Contains(t, msg, "made again")
	status, msg, _ = f.post("/enroll/"+link+"/begin", "", "", "{}")
	assert.Equal(t, http.StatusGone, status, "an old link of an account made again")
	assert.Contains(t, msg, "LINK_INVALID")
}

// A passkey ceremony finishes once, and within its time.
func TestCeremonyFinishesOnce(t *testing.T) {
	f := newFixture(t)
	status, _, set := f.post("/login/begin", "", "", "{}")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, set, ceremonyCookie+"=")
	status, msg, _ := f.post("/login/finish", set, "", `{"id":"x"}`)
	assert.Equal(t, http.StatusUnauthorized, status, "a bad assertion: %s", msg)
	status, msg, _ = f.post("/login/finish", set, "", `{"id":"x"}`)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, msg, "finished already", "a ceremony replayed")

	_, _, set = f.post("/login/begin", "", "", "{}")
	f.clock.add(ceremonyTTL + time.Second)
	_, msg, _ = f.post("/login/finish", set, "", `{"id":"x"}`)
	assert.Contains(t, msg, "took longer than", "a ceremony finished late")
}

// Bodies over MaxBody are refused without being read to the end.
func TestBodyLimit(t *testing.T) {
	f := newFixture(t)
	cookie, csrf := f.signIn(f.account("ann"))
	body := `{"decision":"grant","reason":"` + strings.Repeat("a", MaxBody) + `"}`
	status, msg, _ := f.post("/holds/hold_00000000000000000000000000000000/statement", sessionCookie+"="+cookie, csrf, body)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, msg, "BAD_REQUEST")
}
