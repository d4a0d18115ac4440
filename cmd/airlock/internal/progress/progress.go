package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/term"
)

// DefaultInterval is the least time between two redraws.
const DefaultInterval = 100 * time.Millisecond

// DefaultBarWidth is the number of cells between the brackets.
const DefaultBarWidth = 24

// Enabled reports whether a command should draw progress on f: f is a
// terminal, TERM is not "dumb" and json (the command prints JSON) is false.
func Enabled(f *os.File, json bool) bool {
	if json || f == nil || os.Getenv("TERM") == "dumb" {
		return false
	}
	return term.IsTerminal(int(f.Fd()))
}

// Option configures a Reporter.
type Option func(*Reporter)

// WithClock makes the Reporter read the time from now (tests); now must be
// safe for concurrent use when the Reporter is. Default time.Now.
func WithClock(now func() time.Time) Option {
	return func(r *Reporter) {
		if now != nil {
			r.now = now
		}
	}
}

// WithInterval sets the least time between two redraws; default
// DefaultInterval. Zero redraws on every update.
func WithInterval(d time.Duration) Option {
	return func(r *Reporter) {
		if d >= 0 {
			r.interval = d
		}
	}
}

// WithBarWidth sets the number of cells of the bar; default
// DefaultBarWidth.
func WithBarWidth(n int) Option {
	return func(r *Reporter) {
		if n > 0 {
			r.width = n
		}
	}
}

// Reporter draws the progress of one task on one line. The zero value is
// not usable: call New. A nil *Reporter is a valid reporter that draws
// nothing.
type Reporter struct {
	w        io.Writer
	label    string
	now      func() time.Time
	interval time.Duration
	width    int

	done  atomic.Int64
	total atomic.Int64
	next  atomic.Int64 // unix nanoseconds before which no redraw is due

	mu       sync.Mutex // guards what follows and every write to w
	start    time.Time
	lastLen  int // of the line drawn last, to blank what a shorter one leaves
	finished bool
}

// New returns a Reporter that draws on w; total <= 0 means unknown. It
// draws nothing until the first update. Time counts from New.
func New(w io.Writer, label string, total int64, opts ...Option) *Reporter {
	r := &Reporter{w: w, label: label, now: time.Now, interval: DefaultInterval, width: DefaultBarWidth}
	for _, o := range opts {
		o(r)
	}
	r.start = r.now()
	r.total.Store(total)
	r.next.Store(r.start.UnixNano())
	return r
}

// Add counts n more items done and redraws if a redraw is due.
func (r *Reporter) Add(n int64) {
	if r == nil {
		return
	}
	r.done.Add(n)
	r.update()
}

// Set sets the items done to n and redraws if a redraw is due.
func (r *Reporter) Set(n int64) {
	if r == nil {
		return
	}
	r.done.Store(n)
	r.update()
}

// SetTotal sets the number of items to do; <= 0 means unknown. The next
// redraw shows it.
func (r *Reporter) SetTotal(n int64) {
	if r == nil {
		return
	}
	r.total.Store(n)
}

// Finish draws the final line, with the average rate and the time taken,
// and a newline. Later calls, and updates after it, draw nothing.
func (r *Reporter) Finish() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finished {
		return
	}
	r.finished = true
	r.draw(r.now(), true)
	io.WriteString(r.w, "\n")
}

// update redraws when the interval since the last redraw has passed.
func (r *Reporter) update() {
	now := r.now()
	if now.UnixNano() < r.next.Load() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// Another goroutine may have drawn since the check above.
	if r.finished || now.UnixNano() < r.next.Load() {
		return
	}
	r.next.Store(now.Add(r.interval).UnixNano())
	r.draw(now, false)
}

// draw writes the line for now over the last one. The caller holds mu.
func (r *Reporter) draw(now time.Time, final bool) {
	line := r.line(r.done.Load(), r.total.Load(), now.Sub(r.start), final)
	pad := r.lastLen - len(line)
	r.lastLen = len(line)
	if pad > 0 {
		line += strings.Repeat(" ", pad)
	}
	io.WriteString(r.w, "\r"+line)
}

// line renders the progress of done of total after elapsed.
func (r *Reporter) line(done, total int64, elapsed time.Duration, final bool) string {
	var rate float64
	if elapsed > 0 {
		rate = float64(done) / elapsed.Seconds()
	}
	rateStr := "-/s"
	if rate > 0 {
		rateStr = humanize(rate) + "/s"
	}
	var b strings.Builder
	b.WriteString(r.label)
	if total <= 0 {
		fmt.Fprintf(&b, " %d  %s", done, rateStr)
		if final {
			fmt.Fprintf(&b, "  in %s", duration(elapsed))
		} else {
			fmt.Fprintf(&b, "  elapsed %s", duration(elapsed))
		}
		return b.String()
	}
	fmt.Fprintf(&b, " [%s] %*d/%d %3d%%  %s", r.bar(done, total), len(fmt.Sprint(total)), done, total, percent(done, total), rateStr)
	switch {
	case final:
		fmt.Fprintf(&b, "  in %s", duration(elapsed))
	case done >= total:
		fmt.Fprintf(&b, "  ETA %s", duration(0))
	case rate > 0:
		eta := time.Duration(float64(total-done) / rate * float64(time.Second))
		fmt.Fprintf(&b, "  ETA %s", duration(eta))
	default:
		b.WriteString("  ETA --")
	}
	return b.String()
}

// bar renders done of total as width cells: '=' done, '>' the head, ' '
// to do.
func (r *Reporter) bar(done, total int64) string {
	if done >= total {
		return strings.Repeat("=", r.width)
	}
	filled := 0
	if done > 0 {
		filled = int(done * int64(r.width) / total)
	}
	return strings.Repeat("=", filled) + ">" + strings.Repeat(" ", r.width-filled-1)
}

// percent is done of total in whole percent, floored, 100 only when done;
// at most 100.
func percent(done, total int64) int {
	switch {
	case done >= total:
		return 100
	case done <= 0:
		return 0
	}
	return int(float64(done) / float64(total) * 100)
}

// humanize renders v with three significant figures and a k, M or G
// suffix: 7.5, 950, 12.3k, 123k, 1.23M.
func humanize(v float64) string {
	units := []string{"", "k", "M", "G", "T"}
	u := 0
	for v >= 999.5 && u < len(units)-1 {
		v /= 1000
		u++
	}
	switch {
	case u == 0 && v < 9.95:
		return fmt.Sprintf("%.1f", v)
	case u == 0:
		return fmt.Sprintf("%.0f", v)
	case v < 9.995:
		return fmt.Sprintf("%.2f%s", v, units[u])
	case v < 99.95:
		return fmt.Sprintf("%.1f%s", v, units[u])
	}
	return fmt.Sprintf("%.0f%s", v, units[u])
}

// duration renders d for a person: 0.4s, 9.9s, 42s, 3m07s, 2h05m.
func duration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < 9950*time.Millisecond:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	}
	return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
}
