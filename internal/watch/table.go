package watch

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/airlock-dev/airlock/events"
)

// MaxRecent is how many outcomes a Table keeps.
const MaxRecent = 20

// countKinds are the kinds the counts line shows, always, in this order.
var countKinds = []string{"decided", "held", "granted", "completed", "failed", "denied", "expired", "ambiguous", Rejected}

// Table is the state of the terminal view: the pending holds as the query
// service last listed them, the newest outcomes and the count of each kind
// of event since the watch started.
type Table struct {
	// Server and Workspace are shown in the title; Workspace "" is every
	// workspace.
	Server, Workspace string
	// Started is when the watch started: the counts are since then.
	Started time.Time

	holds    []*events.Op
	holdsErr string
	recent   []Event // oldest first
	counts   map[string]int
	dropped  int
	status   string
}

// NewTable returns an empty Table.
func NewTable(server, workspace string, started time.Time) *Table {
	return &Table{Server: server, Workspace: workspace, Started: started, counts: map[string]int{}}
}

// Add counts e and keeps it among the recent outcomes if it is Terminal.
// It reports whether e changes the pending holds (held, granted, denied or
// expired), so that the caller lists them again.
func (t *Table) Add(e Event) bool {
	t.counts[e.Kind]++
	if e.Terminal() {
		t.recent = append(t.recent, e)
		if len(t.recent) > MaxRecent {
			t.recent = append(t.recent[:0], t.recent[len(t.recent)-MaxRecent:]...)
		}
	}
	switch e.Kind {
	case "held", "granted", "denied", "expired":
		return true
	}
	return false
}

// SetHolds replaces the pending holds with ops (held ops, oldest first, as
// the query service lists them), or records why they could not be listed:
// err non-nil keeps the previous list and shows the error. The Table
// keeps ops.
func (t *Table) SetHolds(ops []*events.Op, err error) {
	if err != nil {
		t.holdsErr = err.Error()
		return
	}
	t.holds, t.holdsErr = ops, ""
}

// SetDropped records how many events the subscription dropped because the
// watch fell behind.
func (t *Table) SetDropped(n int) { t.dropped = n }

// SetStatus shows s (a lost connection, say) under the title; "" clears it.
func (t *Table) SetStatus(s string) { t.status = s }

// Render is the view at now as plain text, one row a line, each line cut
// to width runes and the holds and outcomes cut to fit height lines (no
// limit when 0). Text from events and the query service has its control
// characters replaced, so nothing in it reaches the terminal as a command.
func (t *Table) Render(now time.Time, width, height int) string {
	var lines []string
	title := "airlock watch  " + t.Server + "  "
	if t.Workspace == "" {
		title += "all workspaces"
	} else {
		title += "workspace " + t.Workspace
	}
	lines = append(lines, clean(title)+"  "+now.UTC().Format("2006-01-02 15:04:05Z"))
	if t.status != "" {
		lines = append(lines, "! "+clean(t.status))
	}
	counts := "since " + t.Started.UTC().Format("15:04:05Z") + ":"
	for _, k := range countKinds {
		counts += fmt.Sprintf("  %s %d", k, t.counts[k])
	}
	if n := t.counts[Undecodable]; n > 0 {
		counts += fmt.Sprintf("  undecodable %d", n)
	}
	if t.dropped > 0 {
		counts += fmt.Sprintf("  DROPPED %d", t.dropped)
	}
	lines = append(lines, counts, "")

	// Room for rows: the lines so far, two headings, two column headers
	// and the blank line between the sections are fixed.
	holdRows, recentRows := len(t.holds), len(t.recent)
	if height > 0 {
		room := max(height-len(lines)-5, 2)
		holdRows = min(holdRows, max(room/2, room-recentRows))
		recentRows = min(recentRows, room-holdRows)
	}

	heading := fmt.Sprintf("PENDING HOLDS  %d", len(t.holds))
	if t.holdsErr != "" {
		heading += "  (query failed, as of the last answer: " + clean(t.holdsErr) + ")"
	}
	lines = append(lines, heading)
	lines = append(lines, t.holdRows(now, holdRows)...)
	lines = append(lines, "")
	lines = append(lines, fmt.Sprintf("RECENT OUTCOMES  last %d of at most %d, newest first", len(t.recent), MaxRecent))
	lines = append(lines, t.recentRows(recentRows)...)

	var b strings.Builder
	for _, l := range lines {
		b.WriteString(strings.TrimRight(cut(l, width), " "))
		b.WriteByte('\n')
	}
	return b.String()
}

// holdRows is the holds table with n rows, the last one saying how many
// more there are when they do not all fit.
func (t *Table) holdRows(now time.Time, n int) []string {
	if len(t.holds) == 0 {
		return []string{"  none"}
	}
	more := len(t.holds) - n
	if more > 0 && n > 0 {
		n-- // the row that says so
		more++
	}
	rows := [][]string{{"HOLD", "AGE", "EXPIRES IN", "WORKSPACE", "TOOL", "AGENT", "REASON"}}
	for _, op := range t.holds[:n] {
		expires := "-"
		if op.HoldExpiresAt != nil {
			if d := op.HoldExpiresAt.Sub(now); d > 0 {
				expires = Short(d)
			} else {
				expires = "expiring"
			}
		}
		rows = append(rows, []string{op.HoldID, Short(now.Sub(op.CreatedAt)), expires, op.Workspace, op.Tool, op.Agent, op.Reason})
	}
	out := columns(rows)
	if more > 0 {
		out = append(out, fmt.Sprintf("  ... and %d more", more))
	}
	return out
}

// recentRows is the outcomes table, newest first, with n rows.
func (t *Table) recentRows(n int) []string {
	if len(t.recent) == 0 {
		return []string{"  none yet"}
	}
	rows := [][]string{{"TIME", "WORKSPACE", "OP", "TOOL", "OUTCOME", "DETAIL"}}
	for i := len(t.recent) - 1; i >= len(t.recent)-n; i-- {
		e := t.recent[i]
		rows = append(rows, []string{e.Time.UTC().Format("15:04:05"), dash(e.Workspace), dash(e.OpID), dash(e.Tool), e.Kind, strings.Join(Details(e), " ")})
	}
	return columns(rows)
}

// columns lines up rows (the first is the header), indented by two.
func columns(rows [][]string) []string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		for i, c := range r {
			if i > 0 {
				_, _ = tw.Write([]byte{'\t'})
			}
			_, _ = tw.Write([]byte(clean(c)))
		}
		_, _ = tw.Write([]byte{'\n'})
	}
	_ = tw.Flush()
	var out []string
	for _, l := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		out = append(out, strings.TrimRight("  "+l, " "))
	}
	return out
}

// Short is d in at most two units, rounded down: 45s, 3m04s, 2h05m, 3d04h.
func Short(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// clean replaces control characters (escape, tab, newline...) with '?'.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return '?'
		}
		return r
	}, s)
}

// cut shortens s to width runes; 0 is no limit.
func cut(s string, width int) string {
	if width <= 0 || utf8.RuneCountInString(s) <= width {
		return s
	}
	return string([]rune(s)[:width])
}

// The ANSI sequences of the terminal view.
const (
	// EnterScreen switches to the alternate screen and hides the cursor;
	// LeaveScreen undoes both.
	EnterScreen = "\x1b[?1049h\x1b[?25l"
	LeaveScreen = "\x1b[?25h\x1b[?1049l"
)

// Frame is one redraw of a rendering s: the cursor goes home, each line
// overwrites the one on screen and clears what is left of it, and the
// rest of the screen is cleared.
func Frame(s string) string {
	body := strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\x1b[K\r\n")
	return "\x1b[H" + body + "\x1b[K\x1b[J"
}
