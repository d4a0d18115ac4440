// The approver inbox and its webhooks, as the app runs them: the
// principals the gate checks approvals against, the inbox server, the
// notifier.

package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/inbox"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/notify"
	"github.com/airlock-dev/airlock/consumers/gate"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
)

// principal looks a command's principal up in the authority.
func (a *App) principal(name string) (gate.Principal, bool) {
	p, ok := a.Authority.Lookup(name)
	var gp gate.Principal
	if ok {
		gp = gate.Principal{Name: p.Name, Role: string(p.Role), Key: p.PublicKey}
		if p.Role != authority.RoleApprover {
			return gp, true
		}
	}
	// An approver of the inbox signs with its passkeys, in its workspaces.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	acct, _, err := a.Approvers.Account(ctx, name)
	if err != nil || len(acct.Passkeys) == 0 {
		return gp, ok
	}
	if !ok {
		gp = gate.Principal{Name: name, Role: gate.RoleApprover}
	}
	gp.Passkeys = map[string]events.RelyingParty{}
	for _, pk := range acct.Passkeys {
		gp.Passkeys[pk.PublicKey] = pk.RP
	}
	gp.PasskeyWorkspaces = acct.Workspaces
	return gp, true
}

// notifier announces holds to the workspaces' webhooks, with a link to
// the hold in the inbox when this process knows the inbox's origin.
func (a *App) notifier(cfg Config) (*notify.Notifier, error) {
	ncfg := notify.Config{
		JetStream: a.JetStream, Webhook: func(ws string) string { return a.gate.Policy().Webhook(ws) },
		Active: func() bool { return a.gate.Policy().HasWebhooks() },
		Logger: cfg.Logger, Clock: cfg.Clock, Registerer: a.Metrics.Registry(),
	}
	if a.uiOrigin != "" {
		ncfg.Link = func(ctx context.Context, ws, holdID string, expires time.Time) (string, error) {
			token, err := a.Approvers.MintLink(ctx, ws, holdID, expires)
			if err != nil {
				return "", err
			}
			return a.uiOrigin + "/l/" + token, nil
		}
	}
	return notify.New(ncfg)
}

// UIAddr is where the inbox is served; empty when it is not.
func (a *App) UIAddr() string { return a.ui.addr() }

// UIOrigin is the inbox's public origin; empty when it is not served.
func (a *App) UIOrigin() string { return a.uiOrigin }

// startUI listens for the inbox, when asked to.
func (a *App) startUI(ctx context.Context, cfg Config) error {
	if cfg.UIListen == "" {
		return nil
	}
	if !cfg.Auth {
		return errors.New("app: the inbox needs authentication: it resolves holds only with approvers' passkeys; drop --no-auth")
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	if err := a.ui.listen(cfg.UIListen, srv); err != nil {
		return fmt.Errorf("app: inbox: %w", err)
	}
	a.uiOrigin = cfg.UIOrigin
	if a.uiOrigin == "" {
		a.uiOrigin = fmt.Sprintf("http://localhost:%d", a.ui.ln.Addr().(*net.TCPAddr).Port)
	}
	var err error
	a.inbox, err = inbox.New(ctx, inbox.Config{
		Conn: a.Conn, Store: a.Approvers, Origin: a.uiOrigin, Clock: cfg.Clock, Logger: cfg.Logger,
		Root: func(ws string) string { return a.gate.Policy().Root(ws) },
	})
	if err != nil {
		return err
	}
	srv.Handler = a.inbox
	return nil
}
