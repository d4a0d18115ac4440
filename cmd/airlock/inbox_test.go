package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/approvers"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chromium is the browser the inbox's tests drive: $AIRLOCK_CHROMIUM, or
// Debian's chromium. Without one the tests skip, unless
// AIRLOCK_REQUIRE_BROWSER is set (CI sets it, having installed chromium).
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("AIRLOCK_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("AIRLOCK_REQUIRE_BROWSER") != "" {
		t.Fatal("no Chromium, and AIRLOCK_REQUIRE_BROWSER is set: apt-get install chromium (.ci/run does), or set AIRLOCK_CHROMIUM")
	}
	t.Skip("no Chromium here (apt-get install chromium, or set AIRLOCK_CHROMIUM): the inbox's browser tests skip")
	return ""
}

// artifacts is the folder a browser test saves its screenshots in:
// $AIRLOCK_TEST_ARTIFACTS/<test>, else airlock-test-artifacts/<test> in
// the temporary directory. It is kept after the test.
func artifacts(t *testing.T) string {
	t.Helper()
	root := os.Getenv("AIRLOCK_TEST_ARTIFACTS")
	if root == "" {
		root = filepath.Join(os.TempDir(), "airlock-test-artifacts")
	}
	dir := filepath.Join(root, t.Name())
	require.NoError(t, os.MkdirAll(dir, 0o755))
	t.Logf("screenshots in %s", dir)
	return dir
}

// browser is one headless Chromium with a virtual passkey authenticator,
// as a person with a phone that has a passkey.
type browser struct {
	t   *testing.T
	ctx context.Context
}

func newBrowser(t *testing.T, chrome string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelA() })
	b := &browser{t: t, ctx: ctx}
	// The first action starts the browser, which lives as long as the
	// context it is given: this one, not a timeout's.
	require.NoError(t, chromedp.Do(ctx))
	b.do(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := chromedp.Call(ctx, webauthn.Enable, webauthn.EnableParams{}); err != nil {
			return err
		}
		_, err := chromedp.Call(ctx, webauthn.AddVirtualAuthenticator, webauthn.AddVirtualAuthenticatorParams{Options: &webauthn.VirtualAuthenticatorOptions{
			Protocol: webauthn.AuthenticatorProtocolCtap2, Transport: webauthn.AuthenticatorTransportInternal,
			HasResidentKey: true, HasUserVerification: true, IsUserVerified: true, AutomaticPresenceSimulation: true,
		}})
		return err
	}))
	b.phone()
	return b
}

func (b *browser) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		defer cancel()
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + (document.body ? document.body.innerText : "")`))
		b.t.Fatalf("browser: %v; the page:\n%s", err, text)
	}
}

// until waits for a JavaScript expression to be true, across page loads.
func (b *browser) until(expr string) {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("Boolean("+expr+")"))
		cancel()
		if err == nil && ok {
			return
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`location.href + "\n" + (document.body ? document.body.innerText : "")`))
	b.t.Fatalf("waiting for %s (%v); the page:\n%s", expr, last, text)
}

func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAsValue, chromedp.EvalAwaitPromise))
	require.NoError(b.t, err, expr)
	return v
}

func (b *browser) phone() {
	b.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
}

func (b *browser) desktop() { b.do(chromedp.EmulateViewport(1280, 900)) }

func (b *browser) shot(dir, name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(b.t, err)
	require.NoError(b.t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
	if d := os.Getenv("AIRLOCK_UPDATE_SCREENSHOTS"); d != "" {
		require.NoError(b.t, os.WriteFile(filepath.Join(d, "inbox-"+name+".png"), png, 0o644))
	}
}

// cookie is the browser's cookie of that name for origin.
func (b *browser) cookie(origin, name string) string {
	b.t.Helper()
	var value string
	b.do(chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{origin}})
		for _, c := range res.Cookies {
			if c.Name == name {
				value = c.Value
			}
		}
		return err
	}))
	require.NotEmpty(b.t, value, "cookie %s", name)
	return value
}

// enroll opens an enrollment link and enrolls the authenticator's
// passkey; the browser is then signed in.
func (b *browser) enroll(link string) {
	b.t.Helper()
	b.do(chromedp.Navigate(link), chromedp.WaitVisible(chromedp.CSS(`[data-action=enroll]`)), chromedp.Click(chromedp.CSS(`[data-action=enroll]`)))
	b.until(`location.pathname === "/" && document.querySelector("h1") && document.querySelector("h1").textContent === "Pending holds"`)
}

// inboxLink is the enrollment link approvers add printed.
func inboxLink(t *testing.T, out string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "http://") && strings.Contains(l, "/enroll/") {
			return strings.TrimSpace(l)
		}
	}
	t.Fatalf("no enrollment link in %q", out)
	return ""
}

// submitHeldCLI submits a call that the policy holds and returns its op
// and hold ids.
func submitHeldCLI(t *testing.T, srv *server, ws, tool string, args any) (op, hold string) {
	t.Helper()
	b, err := json.Marshal(args)
	require.NoError(t, err)
	out, errOut, code := srv.run(t, "submit", "--ws", ws, "--tool", tool, "--args", string(b), "--json")
	require.Equal(t, exitPending, code, "%s %s", out, errOut)
	var held struct {
		OpID   string `json:"op_id"`
		HoldID string `json:"hold_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &held))
	require.NotEmpty(t, held.HoldID, out)
	return held.OpID, held.HoldID
}

// page is a client of the inbox outside the browser, with what it holds
// of a session: how an attacker would send requests.
type page struct {
	t      *testing.T
	origin string
	c      *http.Client
}

func newPage(t *testing.T, origin string) *page {
	return &page{t: t, origin: origin, c: &http.Client{
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       20 * time.Second,
	}}
}

// send makes a request; headers are name, value pairs. It returns the
// status and the refusal code of a JSON answer.
func (p *page) send(method, path, body string, headers ...string) (int, string) {
	p.t.Helper()
	req, err := http.NewRequest(method, p.origin+path, strings.NewReader(body))
	require.NoError(p.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Cookie" {
			req.AddCookie(&http.Cookie{Name: "airlock_session", Value: headers[i+1]})
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := p.c.Do(req)
	require.NoError(p.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var e struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(b, &e)
	return resp.StatusCode, e.Code
}

// serviceStore opens the deployment's approvers bucket as the service.
func serviceStore(t *testing.T, srv *server) *approvers.Store {
	t.Helper()
	opt, err := authority.ConnectOption(filepath.Join(srv.dir, authority.CredsDir, authority.ServiceName+authority.CredsExt))
	require.NoError(t, err)
	nc, err := nats.Connect(srv.url, opt)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	st, err := approvers.Open(context.Background(), js, nil)
	require.NoError(t, err)
	return st
}

// The approver inbox in a real browser, against a real airlock serve: an
// approver enrolled by link enrolls a passkey (Chrome's virtual
// authenticator), sees a held patch as a diff at a phone's width, its
// HTML shown as text, grants it with a passkey signature and watches the
// op complete; the patch applied once; the approval's WebAuthn signature
// verifies offline from the op's proof. On the way, every attack the
// inbox must refuse is sent, and refused with its code.
func TestInboxInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess and browser test")
	}
	chrome := chromium(t)
	shots := artifacts(t)
	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "hello.txt"), []byte("hello\n"), 0o644))
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(pol, []byte(fmt.Sprintf("tools: {apply_patch: write, exec: exec}\n"+
		"workspaces:\n  prod: {mode: confirm, root: %q}\n  dev: {mode: confirm}\n", root)), 0o600))
	uiAddr := freePort(t)
	_, port, _ := net.SplitHostPort(uiAddr)
	origin := "http://localhost:" + port
	srv := startServer(t, t.TempDir(), freePort(t), nil, "--policy", pol, "--ui", uiAddr)

	out, errOut, rc := srv.run(t, "approvers", "add", "ann", "--ws", "prod")
	require.Equal(t, 0, rc, "%s %s", out, errOut)
	annLink := inboxLink(t, out)
	require.True(t, strings.HasPrefix(annLink, origin+"/enroll/"), annLink)
	out, errOut, rc = srv.run(t, "approvers", "add", "bob", "--ws", "dev")
	require.Equal(t, 0, rc, "%s %s", out, errOut)
	bobLink := inboxLink(t, out)
	_, errOut, rc = srv.run(t, "approvers", "add", "agent", "--ws", "prod")
	assert.Equal(t, exitUsage, rc, "an approver named as the agent: %s", errOut)

	// The agent's calls, with attacker-controlled text in them.
	patch := "--- a/hello.txt\n+++ b/hello.txt\n@@ -1 +1 @@\n-hello\n+<script>window.pwned=1</script><img src=x onerror=\"window.pwned=2\">\n"
	opID, holdID := submitHeldCLI(t, srv, "prod", "apply_patch", map[string]string{"patch": patch})
	_, otherHold := submitHeldCLI(t, srv, "prod", "exec", map[string]any{"argv": []string{"/bin/echo", "<b onmouseover=alert(1)>x</b>"}})
	_, devHold := submitHeldCLI(t, srv, "dev", "exec", map[string]any{"argv": []string{"/bin/true"}})

	ann := newBrowser(t, chrome)
	ann.enroll(annLink)
	ann.until(`document.querySelector('a.cardlink[href="/holds/` + holdID + `"]') !== null`)
	assert.False(t, eval[bool](ann, `document.body.innerText.includes("`+devHold+`")`), "a hold of another workspace shows")
	ann.shot(shots, "pending-phone")
	ann.desktop()
	ann.shot(shots, "pending-desktop")
	ann.phone()

	// The hold's detail: the patch as a diff, its HTML as text.
	ann.do(chromedp.Click(chromedp.CSS(`a.cardlink[href="/holds/` + holdID + `"]`)))
	ann.until(`document.querySelector(".diff .add") !== null`)
	assert.Contains(t, eval[string](ann, `document.querySelector(".diff .add").textContent`), `<script>window.pwned=1</script><img src=x onerror="window.pwned=2">`)
	assert.Equal(t, "hello.txt", eval[string](ann, `document.querySelector(".diff figcaption").textContent`))
	assert.False(t, eval[bool](ann, `document.querySelector(".diff script, .diff img") !== null`), "the patch's HTML became elements")
	assert.True(t, eval[bool](ann, `window.pwned === undefined`), "the patch's script ran")
	ann.shot(shots, "hold-phone")
	ann.desktop()
	ann.shot(shots, "hold-desktop")
	ann.phone()

	// Attacks, with what the browser holds of ann's session.
	p := newPage(t, origin)
	annCookie := ann.cookie(origin, "airlock_session")
	annCSRF := eval[string](ann, `document.querySelector('meta[name="airlock-csrf"]').content`)
	stmt := `{"decision":"grant","reason":"x"}`
	statementPath := "/holds/" + holdID + "/statement"
	for _, tc := range []struct {
		name    string
		headers []string
		status  int
		code    string
	}{
		{"a forged CSRF token", []string{"Cookie", annCookie, "Origin", origin, "X-Airlock-CSRF", "forged"}, 403, "CSRF_INVALID"},
		{"no CSRF token", []string{"Cookie", annCookie, "Origin", origin}, 403, "CSRF_INVALID"},
		{"another origin", []string{"Cookie", annCookie, "Origin", "http://evil.localhost:" + port, "X-Airlock-CSRF", annCSRF}, 403, "ORIGIN_INVALID"},
		{"no origin", []string{"Cookie", annCookie, "X-Airlock-CSRF", annCSRF}, 403, "ORIGIN_INVALID"},
		{"a cross-site fetch", []string{"Cookie", annCookie, "Origin", origin, "Sec-Fetch-Site", "cross-site", "X-Airlock-CSRF", annCSRF}, 403, "ORIGIN_INVALID"},
		{"a tampered session cookie", []string{"Cookie", annCookie[:len(annCookie)-2] + "xx", "Origin", origin, "X-Airlock-CSRF", annCSRF}, 401, "LOGIN_REQUIRED"},
		{"no session", []string{"Origin", origin, "X-Airlock-CSRF", annCSRF}, 401, "LOGIN_REQUIRED"},
	} {
		status, code := p.send("POST", statementPath, stmt, tc.headers...)
		assert.Equal(t, tc.status, status, tc.name)
		assert.Equal(t, tc.code, code, tc.name)
	}
	// An agent's credentials reach no page: its creds file and seed are
	// no login, as a bearer token or a cookie.
	creds, err := os.ReadFile(filepath.Join(srv.dir, authority.CredsDir, "agent"+authority.CredsExt))
	require.NoError(t, err)
	for _, h := range [][]string{{"Authorization", "Bearer " + strings.Join(strings.Fields(string(creds)), "")}, {"Cookie", "agent"}} {
		status, code := p.send("GET", "/holds/"+holdID, "", h...)
		assert.Equal(t, http.StatusUnauthorized, status, h[0])
		assert.Equal(t, "LOGIN_REQUIRED", code, h[0])
		status, _ = p.send("GET", "/", "", h...)
		assert.Equal(t, http.StatusUnauthorized, status, "the inbox with %s", h[0])
	}
	// The enrollment link works once.
	tok := annLink[strings.LastIndex(annLink, "/")+1:]
	status, code := p.send("GET", "/enroll/"+tok, "")
	assert.Equal(t, http.StatusGone, status)
	assert.Equal(t, "LINK_INVALID", code)
	status, code = p.send("POST", "/enroll/"+tok+"/begin", "{}", "Origin", origin)
	assert.Equal(t, http.StatusGone, status)
	assert.Equal(t, "LINK_INVALID", code)
	// An expired one works never.
	out, errOut, rc = srv.run(t, "approvers", "add", "carol", "--ws", "prod", "--ttl", "1s")
	require.Equal(t, 0, rc, "%s %s", out, errOut)
	carol := inboxLink(t, out)

	// Bob, with a passkey of his own, for workspace dev.
	bob := newBrowser(t, chrome)
	bob.enroll(bobLink)
	bobCookie := bob.cookie(origin, "airlock_session")
	bobCSRF := eval[string](bob, `document.querySelector('meta[name="airlock-csrf"]').content`)
	status, code = p.send("GET", "/holds/"+holdID, "", "Cookie", bobCookie)
	assert.Equal(t, http.StatusNotFound, status, "bob sees ann's workspace's hold")
	assert.Equal(t, "HOLD_NOT_FOUND", code)
	status, code = p.send("POST", statementPath, stmt, "Cookie", bobCookie, "Origin", origin, "X-Airlock-CSRF", bobCSRF)
	assert.Equal(t, http.StatusNotFound, status, "bob resolves in ann's workspace")
	status, code = p.send("POST", statementPath, stmt, "Cookie", bobCookie, "Origin", origin, "X-Airlock-CSRF", annCSRF)
	assert.Equal(t, "CSRF_INVALID", code, "ann's CSRF token with bob's session")
	status, code = p.send("POST", statementPath, stmt, "Cookie", annCookie, "Origin", origin, "X-Airlock-CSRF", bobCSRF)
	assert.Equal(t, "CSRF_INVALID", code, "bob's CSRF token with ann's session")
	time.Sleep(1500 * time.Millisecond) // carol's link expires
	status, code = p.send("GET", carol[len(origin):], "")
	assert.Equal(t, http.StatusGone, status, "an expired enrollment link")
	assert.Equal(t, "LINK_INVALID", code)

	// Hold links, as a webhook carries them: single use, for the
	// approver's workspaces, expiring; each needs a login.
	st := serviceStore(t, srv)
	mint := func(ws, hold string, ttl time.Duration) string {
		tok, err := st.MintLink(context.Background(), ws, hold, time.Now().Add(ttl))
		require.NoError(t, err)
		return "/l/" + tok
	}
	link := mint("prod", holdID, time.Hour)
	status, _ = p.send("GET", link, "")
	assert.Equal(t, http.StatusSeeOther, status, "a link without a login goes to the login page")
	status, _ = p.send("GET", link, "", "Cookie", annCookie)
	assert.Equal(t, http.StatusSeeOther, status, "ann's link")
	status, code = p.send("GET", link, "", "Cookie", annCookie)
	assert.Equal(t, http.StatusGone, status, "a used link")
	assert.Equal(t, "LINK_INVALID", code)
	devLink := mint("dev", devHold, time.Hour)
	status, code = p.send("GET", devLink, "", "Cookie", annCookie)
	assert.Equal(t, http.StatusForbidden, status, "a link for another workspace")
	assert.Equal(t, "NOT_AUTHORIZED", code)
	status, _ = p.send("GET", devLink, "", "Cookie", bobCookie)
	assert.Equal(t, http.StatusSeeOther, status, "the refused link stays usable by its workspace's approver")
	short := mint("prod", holdID, time.Second)
	time.Sleep(1500 * time.Millisecond)
	status, code = p.send("GET", short, "", "Cookie", annCookie)
	assert.Equal(t, http.StatusGone, status, "an expired link")
	assert.Equal(t, "LINK_INVALID", code)

	// A passkey signature over another hold's statement, sent from the
	// page itself: refused by the gate, nothing resolved.
	forged := eval[map[string]any](ann, `(async () => {
		const post = async (u, b) => { const r = await fetch(u, {method: "POST", headers: {"Content-Type": "application/json", "X-Airlock-CSRF": csrf()}, body: JSON.stringify(b)}); return {status: r.status, body: await r.json()}; };
		const mine = (await post("/holds/`+holdID+`/statement", {decision: "grant", reason: "x"})).body;
		const other = (await post("/holds/`+otherHold+`/statement", {decision: "grant", reason: "x"})).body;
		const cred = await navigator.credentials.get({publicKey: {challenge: b64u.dec(other.challenge), rpId: other.rp_id, userVerification: "required",
			allowCredentials: other.allow.map((id) => ({type: "public-key", id: b64u.dec(id)}))}});
		const r = await post("/holds/`+holdID+`/resolve", {statement: mine.statement, reason: "x", assertion: {
			id: b64u.enc(cred.rawId), authenticator_data: b64u.enc(cred.response.authenticatorData),
			client_data_json: b64u.enc(cred.response.clientDataJSON), signature: b64u.enc(cred.response.signature)}});
		return {status: r.status, code: r.body.code};
	})()`)
	assert.Equal(t, float64(403), forged["status"], "%v", forged)
	assert.Equal(t, "INVALID_SIGNATURE", forged["code"], "%v", forged)
	b, err := os.ReadFile(filepath.Join(root, "hello.txt"))
	require.NoError(t, err)
	assert.Equal(t, "hello\n", string(b), "nothing ran")

	// The grant, from the phone-sized page: signed, and the op completes
	// there, live.
	ann.do(chromedp.Navigate(origin+"/holds/"+holdID), chromedp.WaitVisible(chromedp.CSS(`#reason`)),
		chromedp.SendKeys(chromedp.CSS(`#reason`), "reviewed the diff"),
		chromedp.Click(chromedp.CSS(`button[value=grant]`)))
	ann.until(`document.querySelector('#live [data-state="completed"]') !== null`)
	assert.Contains(t, eval[string](ann, `document.getElementById("status").textContent`), "Granted")
	ann.shot(shots, "completed-phone")
	b, err = os.ReadFile(filepath.Join(root, "hello.txt"))
	require.NoError(t, err)
	assert.Equal(t, "<script>window.pwned=1</script><img src=x onerror=\"window.pwned=2\">\n", string(b), "the patch applied once")

	// History, filtered, at both widths.
	ann.do(chromedp.Navigate(origin + "/history?ws=prod"))
	ann.until(`document.querySelector("table.history tbody tr") !== null`)
	assert.Contains(t, eval[string](ann, `document.querySelector("table.history tbody").innerText`), "ann")
	ann.shot(shots, "history-phone")
	ann.desktop()
	ann.shot(shots, "history-desktop")
	ann.phone()
	status, code = p.send("GET", "/history?ws=dev", "", "Cookie", annCookie)
	assert.Equal(t, http.StatusForbidden, status, "another workspace's history")
	assert.Equal(t, "NOT_AUTHORIZED", code)

	// Bob denies his workspace's call from his page; it never runs.
	bob.do(chromedp.Navigate(origin+"/holds/"+devHold), chromedp.WaitVisible(chromedp.CSS(`#reason`)),
		chromedp.SendKeys(chromedp.CSS(`#reason`), "not now"),
		chromedp.Click(chromedp.CSS(`button[value=deny]`)))
	bob.until(`document.querySelector('#live [data-state="denied"]') !== null`)
	assert.Contains(t, eval[string](bob, `document.getElementById("status").textContent`), "Denied")

	// Every control has a name a screen reader says, every image a text.
	for _, b := range []*browser{ann, bob} {
		unnamed := eval[[]string](b, `(() => {
			const bad = [];
			for (const el of document.querySelectorAll("button, a[href], textarea, select, input")) {
				const label = el.id && document.querySelector('label[for="' + el.id + '"]');
				if (!(el.textContent.trim() || el.getAttribute("aria-label") || label)) bad.push(el.outerHTML);
			}
			for (const img of document.querySelectorAll("img")) if (!img.alt) bad.push(img.outerHTML);
			return bad;
		})()`)
		assert.Empty(t, unnamed, "controls without an accessible name")
	}

	// Sign out, and in again with the passkey alone.
	ann.do(chromedp.Click(chromedp.CSS(`[data-action=logout]`)))
	ann.until(`location.pathname === "/login"`)
	status, _ = p.send("GET", "/holds/"+holdID, "", "Cookie", annCookie)
	assert.Equal(t, http.StatusUnauthorized, status, "a session signed out")
	ann.do(chromedp.Click(chromedp.CSS(`[data-action=login]`)))
	ann.until(`location.pathname === "/" && document.querySelector("h1").textContent === "Pending holds"`)

	// The proof of the op verifies offline, the passkey's signature with
	// it, against the approvers' exported keys.
	dir := t.TempDir()
	proof, approversFile := filepath.Join(dir, "op.proof"), filepath.Join(dir, "approvers.json")
	out, errOut, rc = srv.run(t, "audit", "prove", opID, "-o", proof)
	require.Equal(t, 0, rc, "%s %s", out, errOut)
	out, errOut, rc = srv.run(t, "approvers", "export")
	require.Equal(t, 0, rc, "%s %s", out, errOut)
	require.NoError(t, os.WriteFile(approversFile, []byte(out), 0o644))
	require.Contains(t, out, `"rp_id":"localhost"`, "the export has ann's passkey")
	pub := filepath.Join(dir, "audit.pub")
	pb, err := os.ReadFile(filepath.Join(srv.dir, audit.PubFile))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(pub, pb, 0o644))
	out, errOut, rc = run(t, "audit", "check-proof", proof, "--key", pub, "--approvers", approversFile)
	require.Equal(t, 0, rc, "%s %s", out, errOut)
	assert.Contains(t, out, "webauthn")
	assert.Contains(t, out, "grant of "+holdID+" by ann")
}
