package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Consumer is the durable consumer of AIRLOCK_OPS through which the
// notifiers of every process read held events.
const Consumer = "airlock-notify"

// Defaults and bounds.
const (
	// DefaultMaxAttempts is how many times a notification is POSTed
	// before it is dropped.
	DefaultMaxAttempts = 6
	// DefaultBackoff is the wait after the first failed attempt; it
	// doubles after each, up to DefaultMaxBackoff.
	DefaultBackoff    = time.Second
	DefaultMaxBackoff = time.Minute
	// DefaultTimeout bounds one attempt, the answer's body included.
	DefaultTimeout = 10 * time.Second
	// DefaultMaxInFlight is how many holds are delivered at once.
	DefaultMaxInFlight = 8

	// AckWait is the consumer's ack wait: how long after a process was
	// lost its holds in hand are delivered again. A process in the midst
	// of a delivery marks it in progress every AckWait/3.
	AckWait = 30 * time.Second
	// MaxAckPending bounds the holds in hand of every process together.
	MaxAckPending = 256
	// MaxMessageBytes bounds the JSON body of one notification.
	MaxMessageBytes = 16 << 10
	// MaxReasonBytes bounds the policy's reason as a notification
	// quotes it; a longer one is cut, with "…".
	MaxReasonBytes = 1024
	// MaxLinkBytes bounds the link; a longer one is left out.
	MaxLinkBytes = 2048
	// MaxResponseBytes bounds what is read of an endpoint's answer (to
	// reuse the connection); the rest is left unread.
	MaxResponseBytes = 64 << 10
	// UserAgent is the User-Agent of every POST.
	UserAgent = "airlock"
)

// Config configures a Notifier.
type Config struct {
	// JetStream reads the held events of AIRLOCK_OPS. Required.
	JetStream jetstream.JetStream
	// Webhook is the URL the holds of workspace ws are POSTed to, "" for
	// none: the policy in force's (policy.Policy.Webhook), asked again for
	// every hold, so a reload applies to the next one. Required.
	Webhook func(ws string) string
	// Active reports whether any workspace has a webhook now (the policy
	// in force's policy.Policy.HasWebhooks). While it does not, no hold is
	// taken: holds wait in the consumer, at no cost, and those still
	// pending once a webhook is set are announced then. Asked before each
	// hold, and every IdlePoll while idle. Nil: always.
	Active func() bool
	// Link returns the URL where an approver reviews hold holdID of
	// workspace ws, which need not outlive expires (the hold's expiry).
	// Nil, or an error, sends the notification without a link.
	Link func(ctx context.Context, ws, holdID string, expires time.Time) (string, error)
	// Client POSTs the notifications; default one of the notifier's own
	// that follows no redirect (a 3xx is a refusal), whose idle
	// connections it closes when Run returns. Each attempt's deadline is
	// Timeout, whatever the client's.
	Client *http.Client
	// Logger; default slog.Default(). The webhook's URL, often a
	// credential, is never logged.
	Logger *slog.Logger
	// Clock tells the time, against the holds' expiries: a hold that
	// has expired is not announced. Default time.Now.
	Clock func() time.Time
	// MaxAttempts bounds the POSTs of one notification; default
	// DefaultMaxAttempts.
	MaxAttempts int
	// Backoff is the wait after the first failed attempt, doubling after
	// each up to MaxBackoff, plus up to half again at random; defaults
	// DefaultBackoff and DefaultMaxBackoff (or Backoff, if longer). A
	// Retry-After in seconds on a 429 or 503 replaces it, up to
	// MaxBackoff.
	Backoff    time.Duration
	MaxBackoff time.Duration
	// Timeout bounds one attempt; default DefaultTimeout.
	Timeout time.Duration
	// MaxInFlight is how many holds are delivered at once; default
	// DefaultMaxInFlight, at most MaxAckPending.
	MaxInFlight int
	// Registerer, when set, registers the notifier's metrics
	// (airlock_webhook_*).
	Registerer prometheus.Registerer
}

// EnsureDefaults fills in the defaults of what is unset.
func (c *Config) EnsureDefaults() {
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.Backoff == 0 {
		c.Backoff = DefaultBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = max(DefaultMaxBackoff, c.Backoff)
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.Client == nil {
		c.Client = newClient()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
}

// Validate checks the config, as EnsureDefaults left it; it changes
// nothing.
func (c *Config) Validate() error {
	switch {
	case c.JetStream == nil || c.Webhook == nil:
		return errors.New("notify: JetStream and Webhook are required")
	case c.Client == nil || c.Logger == nil || c.Clock == nil:
		return errors.New("notify: Client, Logger and Clock are required (EnsureDefaults sets them)")
	case c.MaxAttempts < 1:
		return errors.New("notify: MaxAttempts must be at least 1")
	case c.Backoff <= 0 || c.MaxBackoff < c.Backoff:
		return errors.New("notify: Backoff must be positive and MaxBackoff at least Backoff")
	case c.Timeout <= 0:
		return errors.New("notify: Timeout must be positive")
	case c.MaxInFlight < 1 || c.MaxInFlight > MaxAckPending:
		return fmt.Errorf("notify: MaxInFlight must be from 1 to %d", MaxAckPending)
	}
	return nil
}

// newClient is a client of its own (not http.DefaultClient's pool) that
// follows no redirect: a redirected POST would send the hold elsewhere,
// or drop its body.
func newClient() *http.Client {
	return &http.Client{
		Transport: http.DefaultTransport.(*http.Transport).Clone(),
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}
