package policy

import (
	"errors"
	"fmt"
	"net/url"
)

// MaxWebhookBytes bounds a workspace's notify.webhook.
const MaxWebhookBytes = 2048

// checkWebhook reports whether s may be a workspace's notify.webhook: empty
// (none), or an absolute http or https URL with a host and no user info,
// of at most MaxWebhookBytes. Its errors never quote the URL, which is
// often a credential.
func checkWebhook(s string) error {
	if s == "" {
		return nil
	}
	if len(s) > MaxWebhookBytes {
		return fmt.Errorf("is %d bytes, limit %d", len(s), MaxWebhookBytes)
	}
	u, err := url.Parse(s)
	if err != nil {
		return errors.New("is not a URL")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		if u.Scheme == "" {
			return errors.New("must be an absolute http or https URL, not a relative one")
		}
		return fmt.Errorf("has scheme %q: want http or https", truncate(u.Scheme, 16))
	case u.Opaque != "" || u.Hostname() == "":
		return errors.New("must be an absolute http or https URL with a host")
	case u.User != nil:
		return errors.New("must not hold a user name or password: put the credential in the path or query, as the chat tool's webhook URL does")
	}
	return nil
}

// Webhook is the URL workspace ws's holds are POSTed to, or "" when the
// policy names none.
func (p *Policy) Webhook(ws string) string { return p.workspaces[ws].webhook }

// HasWebhooks reports whether any workspace names a webhook.
func (p *Policy) HasWebhooks() bool {
	for _, w := range p.workspaces {
		if w.webhook != "" {
			return true
		}
	}
	return false
}
