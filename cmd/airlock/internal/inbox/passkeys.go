package inbox

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/approvers"
	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/protocol/webauthncose"
	"github.com/go-webauthn/webauthn/webauthn"
)

// The ceremony cookie keeps a passkey ceremony's state (its challenge)
// from begin to finish, MAC'd, so that any process of the deployment can
// finish what another began. It names what it is for, so that the state
// of an enrollment does not pass for a login's.
type ceremony struct {
	Kind    string               `json:"kind"` // "enroll:<token digest>" or "login"
	Session webauthn.SessionData `json:"session"`
	// Begun is when it began: it finishes within ceremonyTTL, once (its
	// challenge is recorded in the store and used up at the finish).
	Begun time.Time `json:"begun"`
}

func (s *Server) setCeremony(ctx context.Context, w http.ResponseWriter, c ceremony) error {
	c.Begun = s.cfg.Clock().UTC()
	if err := s.cfg.Store.NewCeremony(ctx, c.Session.Challenge, ceremonyTTL); err != nil {
		return err
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{
		Name: ceremonyCookie, Value: approvers.Mark(s.mac, ceremonyCookie, base64.RawURLEncoding.EncodeToString(b)),
		Path: "/", HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode, MaxAge: int(ceremonyTTL / time.Second),
	})
	return nil
}

// ceremony is the request's ceremony of kind, used up: a finish that
// comes again, or late, is refused.
func (s *Server) ceremony(ctx context.Context, r *http.Request, kind string) (*webauthn.SessionData, error) {
	c, err := r.Cookie(ceremonyCookie)
	if err != nil {
		return nil, errors.New("no passkey ceremony in progress: start again")
	}
	v, ok := approvers.Unmark(s.mac, ceremonyCookie, c.Value)
	if !ok {
		return nil, errors.New("the passkey ceremony's state is not one this inbox made: start again")
	}
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return nil, err
	}
	var cer ceremony
	if err := json.Unmarshal(b, &cer); err != nil {
		return nil, err
	}
	if cer.Kind != kind {
		return nil, errors.New("the passkey ceremony in progress is another one: start again")
	}
	if age := s.cfg.Clock().Sub(cer.Begun); age > ceremonyTTL || age < -time.Minute {
		return nil, fmt.Errorf("the passkey ceremony took longer than %s: start again", ceremonyTTL)
	}
	if err := s.cfg.Store.UseCeremony(ctx, cer.Session.Challenge); err != nil {
		return nil, errors.New("this passkey ceremony was finished already, or took too long: start again")
	}
	return &cer.Session, nil
}

func enrollKind(token string) string { return "enroll:" + events.Digest([]byte(token)) }

// handleEnrollPage shows an enrollment link's page, without using it.
func (s *Server) handleEnrollPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	en, _, err := s.cfg.Store.Enrollment(ctx, r.PathValue("token"))
	if err != nil {
		s.fail(w, r, http.StatusGone, CodeLinkUsed, "this enrollment link was used already, has expired, or is not one this inbox made: ask an operator for a new one (airlock approvers add NAME --ws WS)")
		return
	}
	s.render(w, "enroll.html", map[string]any{"Title": "Enroll a passkey", "Enrollee": en.Approver, "Expires": &en.ExpiresAt})
}

func (s *Server) handleEnrollBegin(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	token := r.PathValue("token")
	en, _, err := s.cfg.Store.Enrollment(ctx, token)
	if err != nil {
		s.fail(w, r, http.StatusGone, CodeLinkUsed, "this enrollment link was used already or has expired: ask an operator for a new one")
		return
	}
	a, err := s.enrollee(ctx, en)
	if err != nil {
		s.fail(w, r, http.StatusGone, CodeLinkUsed, err.Error())
		return
	}
	var exclude []protocol.CredentialDescriptor
	for _, c := range a.WebAuthnCredentials() {
		exclude = append(exclude, c.Descriptor())
	}
	creation, sd, err := s.wa.BeginRegistration(a,
		webauthn.WithAuthenticatorSelection(protocol.AuthenticatorSelection{
			ResidentKey: protocol.ResidentKeyRequirementRequired, RequireResidentKey: protocol.ResidentKeyRequired(),
			UserVerification: protocol.VerificationRequired,
		}),
		webauthn.WithExclusions(exclude),
		webauthn.WithConveyancePreference(protocol.PreferNoAttestation),
		// What the gate verifies (events.VerifyStatementSignature).
		webauthn.WithCredentialParameters([]protocol.CredentialParameter{
			{Type: protocol.PublicKeyCredentialType, Algorithm: webauthncose.AlgES256},
			{Type: protocol.PublicKeyCredentialType, Algorithm: webauthncose.AlgEdDSA},
			{Type: protocol.PublicKeyCredentialType, Algorithm: webauthncose.AlgRS256},
		}))
	s.beginCeremony(ctx, w, r, enrollKind(token), sd, creation, err)
}

func (s *Server) handleEnrollFinish(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	token := r.PathValue("token")
	en, rev, err := s.cfg.Store.Enrollment(ctx, token)
	if err != nil {
		s.fail(w, r, http.StatusGone, CodeLinkUsed, "this enrollment link was used already or has expired: ask an operator for a new one")
		return
	}
	sd, err := s.ceremony(ctx, r, enrollKind(token))
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, CodePasskey, err.Error())
		return
	}
	a, err := s.enrollee(ctx, en)
	if err != nil {
		s.fail(w, r, http.StatusGone, CodeLinkUsed, err.Error())
		return
	}
	if len(a.Passkeys) >= approvers.MaxPasskeys {
		s.fail(w, r, http.StatusConflict, CodePasskey, fmt.Sprintf("%s has %d passkeys, the most an approver may have: the link is left unused; ask an operator to remove the approver and add it again", a.Name, approvers.MaxPasskeys))
		return
	}
	cred, err := s.wa.FinishRegistration(a, *sd, r)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, CodePasskey, "the passkey was not enrolled: "+passkeyError(err))
		return
	}
	pub, err := pkixKey(cred.PublicKey)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, CodePasskey, err.Error())
		return
	}
	// The link works once: of two finishes racing, one uses it.
	if err := s.cfg.Store.UseEnrollment(ctx, token, rev); err != nil {
		s.fail(w, r, http.StatusGone, CodeLinkUsed, "this enrollment link was used already: ask an operator for a new one")
		return
	}
	pk := approvers.Passkey{PublicKey: pub, RP: events.RelyingParty{ID: s.rpID, Origin: s.cfg.Origin}, Credential: *cred, EnrolledAt: s.cfg.Clock().UTC()}
	if err := s.cfg.Store.AddPasskey(ctx, a.Name, pk); err != nil {
		s.fail(w, r, http.StatusConflict, CodePasskey, err.Error()+": ask an operator for a new enrollment link")
		return
	}
	s.cfg.Logger.Info("inbox: passkey enrolled", "approver", a.Name, "key", pub)
	s.clearCookie(w, ceremonyCookie)
	if err := s.login(ctx, w, r, a); err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"next": "/"})
}

// pkixKey turns a COSE public key into what an approval's signature
// names: base64url of its PKIX DER.
func pkixKey(cose []byte) (string, error) {
	block, _ := pem.Decode([]byte(webauthncose.DisplayPublicKey(cose)))
	if block == nil {
		return "", errors.New("the passkey's public key is of a kind the inbox does not take: use a passkey with ES256, EdDSA or RS256")
	}
	return base64.RawURLEncoding.EncodeToString(block.Bytes), nil
}

func passkeyError(err error) string {
	var pe *protocol.Error
	if errors.As(err, &pe) && pe.DevInfo != "" {
		return pe.Details + ": " + pe.DevInfo
	}
	return err.Error()
}

// enrollee is the account an enrollment is for, if it is still the
// account the link was made for.
func (s *Server) enrollee(ctx context.Context, en *approvers.Enrollment) (*approvers.Account, error) {
	a, _, err := s.cfg.Store.Account(ctx, en.Approver)
	if err != nil || !bytes.Equal(a.Handle, en.Handle) {
		return nil, errors.New("the approver of this link was removed (or made again since): ask an operator for a new link")
	}
	return a, nil
}

// login starts a session of a, ending the one the request had, if any.
func (s *Server) login(ctx context.Context, w http.ResponseWriter, r *http.Request, a *approvers.Account) error {
	if old, _, err := s.session(r); err == nil {
		_ = s.cfg.Store.EndSession(ctx, old.token)
	}
	token, _, err := s.cfg.Store.NewSession(ctx, a, s.cfg.Life)
	if err != nil {
		return err
	}
	s.setSession(w, token)
	return nil
}

func (s *Server) handleLoginPage(w http.ResponseWriter, r *http.Request) {
	next := r.URL.Query().Get("next")
	if !localPath(next) {
		next = "/"
	}
	s.render(w, "login.html", map[string]any{"Title": "Sign in", "Next": next})
}

// localPath reports whether p is a path of this inbox, not a way out.
func localPath(p string) bool {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.Contains(p, "\\") {
		return false
	}
	u, err := url.Parse(p)
	return err == nil && u.Host == "" && u.Scheme == ""
}

func (s *Server) handleLoginBegin(w http.ResponseWriter, r *http.Request) {
	assertion, sd, err := s.wa.BeginDiscoverableLogin(webauthn.WithUserVerification(protocol.VerificationRequired))
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	s.beginCeremony(ctx, w, r, "login", sd, assertion, err)
}

// beginCeremony answers a ceremony's begin: the options for the browser
// (what the library made, with err), the ceremony's state kept for its
// finish.
func (s *Server) beginCeremony(ctx context.Context, w http.ResponseWriter, r *http.Request, kind string, sd *webauthn.SessionData, options any, err error) {
	if err == nil {
		err = s.setCeremony(ctx, w, ceremony{Kind: kind, Session: *sd})
	}
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, CodeUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, options)
}

func (s *Server) handleLoginFinish(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	sd, err := s.ceremony(ctx, r, "login")
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, CodePasskey, err.Error())
		return
	}
	var who *approvers.Account
	_, err = s.wa.FinishDiscoverableLogin(func(rawID, handle []byte) (webauthn.User, error) {
		a, err := s.cfg.Store.ByHandle(ctx, handle)
		if err != nil {
			return nil, errors.New("no approver has this passkey")
		}
		who = a
		return a, nil
	}, *sd, r)
	if err != nil || who == nil {
		msg := "the passkey did not sign in"
		if err != nil {
			msg += ": " + passkeyError(err)
		}
		s.fail(w, r, http.StatusUnauthorized, CodePasskey, msg+"; enroll one from an enrollment link")
		return
	}
	s.clearCookie(w, ceremonyCookie)
	if err := s.login(ctx, w, r, who); err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, err.Error())
		return
	}
	s.cfg.Logger.Info("inbox: signed in", "approver", who.Name)
	writeJSON(w, http.StatusOK, map[string]string{"next": "/"})
}

// assertion is a passkey's answer to navigator.credentials.get, as the
// page posts it: base64url fields.
type assertion struct {
	ID                string `json:"id"`
	AuthenticatorData string `json:"authenticator_data"`
	ClientDataJSON    string `json:"client_data_json"`
	Signature         string `json:"signature"`
}

// approval turns the page's assertion over statement into an approval:
// the signature names the public key of the account's passkey whose
// credential id the assertion gives.
func approval(a *approvers.Account, st events.ApprovalStatement, as assertion) (*events.Approval, error) {
	id, err := base64.RawURLEncoding.DecodeString(as.ID)
	if err != nil {
		return nil, fmt.Errorf("the credential id is not base64url: %v", err)
	}
	var pk *approvers.Passkey
	for i := range a.Passkeys {
		if bytes.Equal(a.Passkeys[i].Credential.ID, id) {
			pk = &a.Passkeys[i]
		}
	}
	if pk == nil {
		return nil, fmt.Errorf("the passkey that signed is not one %s enrolled", a.Name)
	}
	var parts [3][]byte
	for i, p := range []string{as.AuthenticatorData, as.ClientDataJSON, as.Signature} {
		if parts[i], err = base64.RawURLEncoding.DecodeString(p); err != nil {
			return nil, fmt.Errorf("the assertion's fields are not base64url: %v", err)
		}
	}
	return &events.Approval{Statement: st, Signature: events.ApprovalSignature{
		Alg: events.AlgWebAuthn, Key: pk.PublicKey, Sig: events.WebAuthnSignature(parts[0], parts[1], parts[2]),
	}}, nil
}
