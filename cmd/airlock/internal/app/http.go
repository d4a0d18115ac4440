package app

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// httpPart is one HTTP server of the process (metrics, the inbox): it
// listens at start, serves once every part runs, and stops at shutdown,
// outside the parts' group, so that it keeps answering while they stop.
type httpPart struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// listen listens on addr for srv.
func (h *httpPart) listen(addr string, srv *http.Server) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	h.srv, h.ln = srv, ln
	return nil
}

// addr is where it listens; empty when it does not.
func (h *httpPart) addr() string {
	if h.ln == nil {
		return ""
	}
	return h.ln.Addr().String()
}

// serve serves, when it listens.
func (h *httpPart) serve(log *slog.Logger, name string) {
	if h.ln == nil {
		return
	}
	h.done = make(chan struct{})
	go func() {
		defer close(h.done)
		if err := h.srv.Serve(h.ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error(name+" stopped", "err", err)
		}
	}()
}

// stop shuts the server down within 5 seconds, or closes the listener
// it never served on (a start that failed).
func (h *httpPart) stop() {
	switch {
	case h.done != nil:
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := h.srv.Shutdown(ctx); err != nil {
			_ = h.srv.Close()
		}
		cancel()
		<-h.done
		h.done = nil
	case h.ln != nil:
		_ = h.ln.Close()
	}
}
