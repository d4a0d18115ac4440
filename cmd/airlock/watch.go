package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/watch"
	"github.com/airlock-dev/airlock/producers"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// Watch's pacing.
const (
	// watchBuffer is how many received events wait for watch; beyond it
	// the client drops them and watch says how many.
	watchBuffer = 64 << 10
	// holdsEvery is how often the terminal view lists the pending holds
	// (and redraws, for the ages); holdsSoon how long after an event that
	// changes them it lists them again, so the projection has applied it.
	holdsEvery = time.Second
	holdsSoon  = 200 * time.Millisecond
	// holdsTimeout bounds one listing.
	holdsTimeout = 2 * time.Second
)

func newWatch(g *globals) *cobra.Command {
	var (
		ws     string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "watch [--ws W] [--json]",
		Short: "Watch ops change state, live: lines when piped, a table of holds and outcomes on a terminal",
		Long: `Watch shows the op events, rejections, mode controls and policy loads
as AIRLOCK_OPS stores them (republished on airlock.v1.live.>: an append
the stream refused never shows), from the moment it starts (not history:
see "ops list"). Airlock republishes only while someone subscribes there
(serve --live-feed auto): watch asks Airlock to turn the feed on once it
has subscribed, and again after each reconnection. It connects as the
auditor by default; an approver or operator credential works too, an
agent's does not.

Piped (or with --json, or TERM=dumb), it prints one line per event: time
(when it was stored, RFC 3339 UTC with milliseconds), workspace, op id, tool,
event, then key=value details (codes, reasons, approvers, attempts,
durations, result sizes: events carry digests, never args or results).
With --json, one JSON object per line instead, with the event's stream
sequence ("seq"). A message that is not one the stream stored, or not a
valid event for its subject, is shown as "undecodable" with its subject,
and watching goes on.

On a terminal it redraws a table about once a second and on every event:
the pending holds (hold, age, expiry, tool, agent, reason), the newest
outcomes and the count of each kind of event since it started. Ctrl-C
ends it.

--ws W subscribes to that workspace's subjects only, plus the policy
loads, which hold for every workspace. Exit status: 0 on Ctrl-C, 1 when it
cannot connect or subscribe or the connection closes, 2 usage.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ws != "" && !events.ValidName(ws) {
				return usageError("--ws %q is not a valid workspace name", ws)
			}
			nc, err := g.connect("auditor")
			if err != nil {
				return err
			}
			defer nc.Close()
			w, err := newWatcher(nc, ws)
			if err != nil {
				return err
			}
			if w.feed != "" {
				fmt.Fprintln(cmd.ErrOrStderr(), "airlock:", w.feed)
			}
			out := cmd.OutOrStdout()
			if f, ok := out.(*os.File); ok && !asJSON && isTerminal(f) {
				return w.table(cmd.Context(), f)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "watching %s on %s as %s (Ctrl-C to stop)\n",
				strings.Join(watch.Subjects(ws), ", "), nc.ConnectedUrlRedacted(), principal(g.credsFor("auditor"), "auditor"))
			return w.lines(cmd.Context(), out, cmd.ErrOrStderr(), asJSON)
		},
	}
	cmd.Flags().StringVar(&ws, "ws", "", "only this workspace's events (and policy loads)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per event (NDJSON), even on a terminal")
	return cmd
}

// isTerminal reports whether f is a terminal the table can be drawn on.
func isTerminal(f *os.File) bool {
	return os.Getenv("TERM") != "dumb" && term.IsTerminal(int(f.Fd()))
}

// watcher receives the events of its subscriptions on msgs, and what
// becomes of the connection on conn.
type watcher struct {
	nc *nats.Conn
	ws string
	// feed is a warning about the live feed for the user, empty when
	// Airlock said it is on.
	feed string
	subs []*nats.Subscription
	msgs chan *nats.Msg
	conn chan connState
}

// connState is a change of the connection: a disconnection, a
// reconnection, or its end.
type connState struct {
	text   string
	closed bool
}

// newWatcher subscribes to the events of workspace ws (every workspace
// when "") on nc. The server refuses the subscriptions of a principal that
// may not watch; newWatcher waits for its answer and returns an error.
func newWatcher(nc *nats.Conn, ws string) (*watcher, error) {
	w := &watcher{nc: nc, ws: ws, msgs: make(chan *nats.Msg, watchBuffer), conn: make(chan connState, 16)}
	note := func(s connState) {
		select {
		case w.conn <- s:
		default:
		}
	}
	nc.SetDisconnectErrHandler(func(_ *nats.Conn, err error) {
		text := "disconnected; reconnecting, and events meanwhile are missed"
		if err != nil {
			text = fmt.Sprintf("disconnected (%v); reconnecting, and events meanwhile are missed", err)
		}
		note(connState{text: text})
	})
	nc.SetReconnectHandler(func(*nats.Conn) {
		note(connState{text: "reconnected at " + time.Now().UTC().Format("15:04:05Z") + "; events while disconnected were missed"})
		// A restarted Airlock starts with the feed off until it counts
		// the watchers: ask, rather than wait for its next count.
		go func() { _ = ensureLive(nc) }()
	})
	nc.SetClosedHandler(func(*nats.Conn) { note(connState{text: "connection closed", closed: true}) })
	for _, s := range watch.Subjects(ws) {
		sub, err := nc.ChanSubscribe(s, w.msgs)
		if err != nil {
			return nil, fmt.Errorf("subscribe %s: %w", s, err)
		}
		w.subs = append(w.subs, sub)
	}
	if err := nc.Flush(); err != nil {
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	// The server answers a refused subscription before the flush's PONG.
	if err := nc.LastError(); errors.Is(err, nats.ErrPermissionViolation) {
		return nil, events.Errorf(events.CodePermissionDenied, "the server refused the subscriptions: watching needs an approver, operator or auditor credential")
	}
	if err := ensureLive(nc); err != nil {
		w.feed = err.Error()
	}
	return w, nil
}

// liveTimeout bounds watch's question whether the live feed is on.
const liveTimeout = 5 * time.Second

// ensureLive asks Airlock to turn the live feed on for the subscriptions
// just made (serve --live-feed auto runs it only while someone watches),
// and says what is wrong when it is not on: watch goes on anyway, and
// shows what the server republishes.
func ensureLive(nc *nats.Conn) error {
	ctx, cancel := context.WithTimeout(context.Background(), liveTimeout)
	defer cancel()
	st, err := producers.EnsureLive(ctx, nc)
	switch {
	case err != nil && strings.Contains(err.Error(), nats.ErrNoResponders.Error()):
		// Airlock is not running, or predates the question (its feed is
		// then always on).
		return errors.New("no Airlock answered whether the live feed is on: events show while an Airlock runs and republishes them")
	case err != nil:
		return fmt.Errorf("could not make sure the live feed is on (%v): events may show late or not at all", err)
	case !st.Live:
		return fmt.Errorf("the live feed is off: Airlock did not see this watch's subscriptions (mode %s), so events may not show", st.Mode)
	}
	return nil
}

// dropped is how many events the subscriptions dropped so far.
func (w *watcher) dropped() int {
	n := 0
	for _, s := range w.subs {
		if d, err := s.Dropped(); err == nil {
			n += d
		}
	}
	return n
}

// lines prints each event as a line (or a JSON object) on out until ctx
// ends, and what happens to the connection on errOut.
func (w *watcher) lines(ctx context.Context, out, errOut io.Writer, asJSON bool) error {
	bw := bufio.NewWriter(out)
	dropped := 0
	var last uint64 // the newest stream sequence shown
	for {
		select {
		case <-ctx.Done():
			_ = bw.Flush()
			return nil
		case s := <-w.conn:
			if err := bw.Flush(); err != nil {
				return err
			}
			if s.closed {
				return errors.New(s.text)
			}
			fmt.Fprintln(errOut, "airlock:", s.text)
		case m := <-w.msgs:
			e := watch.Decode(m.Subject, m.Header, m.Data, time.Now())
			if e.Seq != 0 {
				switch {
				case e.Seq <= last:
					// Already shown: a republish repeated (a new stream
					// leader). What is buffered still goes out.
					if len(w.msgs) == 0 {
						if err := bw.Flush(); err != nil {
							return err
						}
					}
					continue
				case last != 0 && e.Seq > last+1 && w.ws == "":
					// Watching everything, every sequence comes by: a gap
					// is events missed (dropped, or while disconnected).
					fmt.Fprintf(errOut, "airlock: missed %d events (AIRLOCK_OPS %d to %d); airlock ops get shows where their ops stand\n", e.Seq-last-1, last+1, e.Seq-1)
				}
				last = e.Seq
			}
			if asJSON {
				body, err := events.MarshalJSON(e)
				if err != nil {
					return err
				}
				_, _ = bw.Write(body)
			} else {
				_, _ = bw.WriteString(watch.Line(e))
			}
			_ = bw.WriteByte('\n')
			if len(w.msgs) == 0 {
				if err := bw.Flush(); err != nil {
					return err
				}
			}
			if n := w.dropped(); n > dropped {
				fmt.Fprintf(errOut, "airlock: watch fell behind: %d events dropped\n", n-dropped)
				dropped = n
			}
		}
	}
}

// table draws the terminal view on f until ctx ends.
func (w *watcher) table(ctx context.Context, f *os.File) error {
	c, err := producers.New(w.nc)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	tbl := watch.NewTable(w.nc.ConnectedUrlRedacted(), w.ws, time.Now())
	listHolds := func() {
		lctx, cancel := context.WithTimeout(ctx, holdsTimeout)
		defer cancel()
		ops, err := c.ListHolds(lctx, w.ws)
		if ctx.Err() == nil {
			tbl.SetHolds(ops, err)
		}
	}
	draw := func() {
		width, height, err := term.GetSize(int(f.Fd()))
		if err != nil {
			width, height = 0, 0
		}
		tbl.SetDropped(w.dropped())
		_, _ = io.WriteString(f, watch.Frame(tbl.Render(time.Now(), width, height)))
	}
	_, _ = io.WriteString(f, watch.EnterScreen)
	defer func() { _, _ = io.WriteString(f, watch.LeaveScreen) }()
	listHolds()
	draw()
	every := time.NewTicker(holdsEvery)
	defer every.Stop()
	soon := time.NewTimer(holdsSoon)
	soon.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case s := <-w.conn:
			if s.closed {
				return errors.New(s.text)
			}
			tbl.SetStatus(s.text)
		case m := <-w.msgs:
			if tbl.Add(watch.Decode(m.Subject, m.Header, m.Data, time.Now())) {
				soon.Reset(holdsSoon)
			}
		case <-soon.C:
			listHolds()
		case <-every.C:
			listHolds()
		}
		// Take every event waiting before drawing.
		if len(w.msgs) == 0 {
			draw()
		}
	}
}
