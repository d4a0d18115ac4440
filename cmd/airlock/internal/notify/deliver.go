package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/airlock-dev/airlock/events"
)

// result is what one attempt got.
type result struct {
	status int // 0: no answer
	// retryable: worth another attempt (408, 429, 5xx, no answer).
	retryable bool
	// retryAfter is the answer's Retry-After in seconds on a 429 or 503,
	// or -1 when it gave none.
	retryAfter time.Duration
	err        error // why there was no answer, or what the status means
}

// deliver sends the notification of h to webhook, retrying as the config
// says, and returns how it ended; "" when ctx ended first (the hold is
// left to another process).
func (n *Notifier) deliver(ctx context.Context, webhook string, h *events.Held) string {
	log := n.cfg.Logger.With("ws", h.Workspace, "hold", h.HoldID, "op", h.OpID)
	expired := func(attempts int) bool {
		if n.cfg.Clock().Before(h.ExpiresAt) {
			return false
		}
		log.Info("webhook notification not sent: the hold expired", "attempts", attempts)
		return true
	}
	if expired(0) {
		return Expired
	}
	body, err := message(h, n.link(ctx, h)).encode()
	if err != nil {
		log.Warn("webhook notification not sent", "err", err)
		return Failed
	}
	start := time.Now()
	for attempt := 1; ; attempt++ {
		if attempt > 1 && expired(attempt-1) {
			return Expired
		}
		r := n.attempt(ctx, webhook, body)
		ok := r.status >= 200 && r.status < 300
		if !ok && ctx.Err() != nil {
			return "" // Airlock stops: an attempt cut short says nothing
		}
		outcome := ""
		switch {
		case ok:
			n.m.attempts.WithLabelValues(AttemptOK).Inc()
			log.Debug("webhook notification delivered", "attempts", attempt, "status", r.status)
			outcome = Delivered
		case !r.retryable:
			n.m.attempts.WithLabelValues(AttemptError).Inc()
			log.Warn("webhook notification refused; not retried", "attempts", attempt, "status", r.status, "err", r.err)
			outcome = Failed
		case attempt >= n.cfg.MaxAttempts:
			n.m.attempts.WithLabelValues(AttemptError).Inc()
			log.Warn("webhook notification dropped", "attempts", attempt, "status", r.status, "err", r.err)
			outcome = Dropped
		}
		if outcome != "" {
			n.m.seconds.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
			return outcome
		}
		n.m.attempts.WithLabelValues(AttemptRetry).Inc()
		wait := n.backoff(attempt, r.retryAfter)
		log.Debug("webhook notification to be retried", "attempt", attempt, "status", r.status, "err", r.err, "wait", wait)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ""
		}
	}
}

// link asks cfg.Link for the hold's link, "" when there is none.
func (n *Notifier) link(ctx context.Context, h *events.Held) string {
	if n.cfg.Link == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	link, err := n.cfg.Link(ctx, h.Workspace, h.HoldID, h.ExpiresAt)
	switch {
	case err != nil:
		if !errors.Is(ctx.Err(), context.Canceled) { // not when Airlock stops
			n.cfg.Logger.Warn("hold link not made; the notification goes without", "ws", h.Workspace, "hold", h.HoldID, "err", err)
		}
		return ""
	case len(link) > MaxLinkBytes:
		n.cfg.Logger.Warn("hold link too long; the notification goes without", "ws", h.Workspace, "hold", h.HoldID, "bytes", len(link), "limit", MaxLinkBytes)
		return ""
	}
	return link
}

// attempt POSTs body to webhook once, within cfg.Timeout.
func (n *Notifier) attempt(ctx context.Context, webhook string, body []byte) result {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, webhook, bytes.NewReader(body))
	if err != nil {
		// Its error quotes the URL, which is not logged.
		return result{retryAfter: -1, err: errors.New("the webhook is not a URL Airlock can POST to")}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", UserAgent)
	resp, err := n.cfg.Client.Do(req)
	if err != nil {
		return result{retryable: true, retryAfter: -1, err: redact(err)}
	}
	// Read some of the answer so that the connection may be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxResponseBytes))
	_ = resp.Body.Close()
	r := result{status: resp.StatusCode, retryAfter: -1}
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return r
	case c == http.StatusRequestTimeout || c == http.StatusTooManyRequests || c >= 500:
		r.retryable = true
		if c == http.StatusTooManyRequests || c == http.StatusServiceUnavailable {
			r.retryAfter = retryAfter(resp.Header.Get("Retry-After"))
		}
	}
	r.err = fmt.Errorf("status %s", resp.Status)
	return r
}

// retryAfter is a Retry-After header in seconds, or -1 when it is not a
// number of seconds (an HTTP date is not taken).
func retryAfter(v string) time.Duration {
	s, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return -1
	}
	return time.Duration(s) * time.Second
}

// backoff is the wait after failed attempt number attempt (from 1): the
// endpoint's Retry-After when it gave one, else Backoff doubled per
// attempt before, plus up to half again at random; at most MaxBackoff.
func (n *Notifier) backoff(attempt int, after time.Duration) time.Duration {
	if after >= 0 {
		return min(after, n.cfg.MaxBackoff)
	}
	d := n.cfg.Backoff
	for i := 1; i < attempt && d < n.cfg.MaxBackoff; i++ {
		if d > n.cfg.MaxBackoff/2 {
			d = n.cfg.MaxBackoff
			break
		}
		d *= 2
	}
	d += rand.N(d/2 + 1)
	return min(d, n.cfg.MaxBackoff)
}

// redact is a transport error without the URL it names.
func redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}
