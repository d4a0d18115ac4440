package progress

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clock is a fake clock that tests move by hand; safe for concurrent use.
type clock struct{ ns atomic.Int64 }

var epoch = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func (c *clock) now() time.Time          { return epoch.Add(time.Duration(c.ns.Load())) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }
func newClock() (*clock, Option)         { c := &clock{}; return c, WithClock(c.now) }
func draws(out string) int               { return strings.Count(out, "\r") }
func lastLine(out string) string         { return out[strings.LastIndex(out, "\r")+1:] }

func TestKnownTotal(t *testing.T) {
	c, opt := newClock()
	var out bytes.Buffer
	r := New(&out, "verify", 1000, opt, WithBarWidth(10))
	r.Set(0)
	c.advance(time.Second)
	r.Add(250)
	c.advance(50 * time.Millisecond)
	r.Add(10) // 50ms after the last draw: none
	c.advance(50 * time.Millisecond)
	r.Add(40)
	c.advance(900 * time.Millisecond)
	r.Set(1000)
	r.Finish()
	assert.Equal(t, ""+
		"\rverify [>         ]    0/1000   0%  -/s  ETA --"+
		"\rverify [==>       ]  250/1000  25%  250/s  ETA 3.0s"+
		"\rverify [===>      ]  300/1000  30%  273/s  ETA 2.6s"+
		"\rverify [==========] 1000/1000 100%  500/s  ETA 0.0s"+
		"\rverify [==========] 1000/1000 100%  500/s  in 2.0s \n", out.String())
}

func TestDefaultBarAndLongETA(t *testing.T) {
	c, opt := newClock()
	var out bytes.Buffer
	r := New(&out, "audit verify", 1_000_000, opt)
	c.advance(3 * time.Second)
	r.Set(12_345)
	// 4115 leaves/s, 987,655 to go: 240 s.
	assert.Equal(t, "\raudit verify [>                       ]   12345/1000000   1%  4.12k/s  ETA 4m00s", out.String())
	c.advance(27 * time.Second)
	r.Set(510_000)
	// The line is shorter than the last one: blanks cover the rest.
	assert.Equal(t, "audit verify [============>           ]  510000/1000000  51%  17.0k/s  ETA 28s  ", lastLine(out.String()))
}

func TestUnknownTotal(t *testing.T) {
	c, opt := newClock()
	var out bytes.Buffer
	r := New(&out, "replay", 0, opt)
	c.advance(2 * time.Second)
	r.Add(5000)
	c.advance(2 * time.Second)
	r.Add(7000)
	r.Finish()
	// The final line is shorter: blanks cover the rest of the last one.
	assert.Equal(t, ""+
		"\rreplay 5000  2.50k/s  elapsed 2.0s"+
		"\rreplay 12000  3.00k/s  elapsed 4.0s"+
		"\rreplay 12000  3.00k/s  in 4.0s     \n", out.String())
}

func TestSetTotalTurnsCounterIntoBar(t *testing.T) {
	c, opt := newClock()
	var out bytes.Buffer
	r := New(&out, "bench", -1, opt, WithBarWidth(4))
	c.advance(time.Second)
	r.Set(10)
	r.SetTotal(40)
	c.advance(time.Second)
	r.Set(20)
	assert.Equal(t, ""+
		"\rbench 10  10/s  elapsed 1.0s"+
		"\rbench [==> ] 20/40  50%  10/s  ETA 2.0s", out.String())
}

func TestThrottle(t *testing.T) {
	c, opt := newClock()
	var out bytes.Buffer
	r := New(&out, "x", 100, opt)
	// An update every 10ms for a second: a draw at 0, 100ms, ... 900ms.
	for range 100 {
		r.Add(1)
		c.advance(10 * time.Millisecond)
	}
	s := out.String()
	assert.Equal(t, 10, draws(s))
	assert.Contains(t, lastLine(s), " 91/100  91% ")
	r.Finish()
	s = out.String()
	assert.Equal(t, 11, draws(s))
	assert.Equal(t, "x [========================] 100/100 100%  100/s  in 1.0s \n", lastLine(s))
}

func TestIntervalZeroDrawsEveryUpdate(t *testing.T) {
	_, opt := newClock()
	var out bytes.Buffer
	r := New(&out, "x", 3, opt, WithInterval(0), WithBarWidth(3))
	r.Add(1)
	r.Add(1)
	assert.Equal(t, "\rx [=> ] 1/3  33%  -/s  ETA --\rx [==>] 2/3  66%  -/s  ETA --", out.String())
}

func TestFinishOnceAndThenQuiet(t *testing.T) {
	c, opt := newClock()
	var out bytes.Buffer
	r := New(&out, "x", 10, opt, WithBarWidth(2))
	c.advance(time.Second)
	r.Add(4) // stopped early: the final line says how far it got
	r.Finish()
	r.Finish()
	c.advance(time.Second)
	r.Add(6)
	r.Set(10)
	assert.Equal(t, "\rx [> ]  4/10  40%  4.0/s  ETA 1.5s\rx [> ]  4/10  40%  4.0/s  in 1.0s \n", out.String())
}

func TestNilReporterDoesNothing(t *testing.T) {
	var r *Reporter
	assert.NotPanics(t, func() {
		r.Add(1)
		r.Set(2)
		r.SetTotal(3)
		r.Finish()
	})
}

// lockedWriter fails the test if two writes overlap.
type lockedWriter struct {
	busy atomic.Bool
	buf  bytes.Buffer
	bad  atomic.Int64
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	if !w.busy.CompareAndSwap(false, true) {
		w.bad.Add(1)
		return len(p), nil
	}
	defer w.busy.Store(false)
	return w.buf.Write(p)
}

func TestConcurrentAdd(t *testing.T) {
	for _, tc := range []struct {
		name     string
		interval time.Duration
	}{
		{name: "every update draws", interval: 0},
		{name: "throttled", interval: DefaultInterval},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const goroutines, each = 8, 2000
			var w lockedWriter
			r := New(&w, "race", goroutines*each, WithInterval(tc.interval))
			var wg sync.WaitGroup
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range each {
						r.Add(1)
					}
				}()
			}
			wg.Wait()
			r.Finish()
			require.Zero(t, w.bad.Load(), "writes overlapped")
			s := w.buf.String()
			assert.True(t, strings.HasSuffix(s, "\n"))
			assert.Contains(t, lastLine(s), fmt.Sprintf(" %d/%d 100%% ", goroutines*each, goroutines*each))
			// A goroutine whose clock reading is older than the last
			// draw's does not draw.
			assert.LessOrEqual(t, draws(s), goroutines*each+1)
			if tc.interval == 0 {
				assert.Greater(t, draws(s), goroutines)
			}
		})
	}
}

func TestHumanize(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{
		{0.25, "0.2"}, {7.5, "7.5"}, {9.96, "10"}, {950, "950"}, {999.4, "999"}, {999.6, "1.00k"},
		{1234, "1.23k"}, {12_345, "12.3k"}, {99_960, "100k"}, {123_456, "123k"}, {999_700, "1.00M"},
		{4_200_000, "4.20M"}, {3e9, "3.00G"},
	} {
		t.Run(tc.want, func(t *testing.T) { assert.Equal(t, tc.want, humanize(tc.v)) })
	}
}

func TestDuration(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0.0s"}, {0, "0.0s"}, {420 * time.Millisecond, "0.4s"}, {9940 * time.Millisecond, "9.9s"},
		{9960 * time.Millisecond, "9s"}, {42 * time.Second, "42s"}, {187 * time.Second, "3m07s"},
		{2*time.Hour + 5*time.Minute + 59*time.Second, "2h05m"},
	} {
		t.Run(tc.want, func(t *testing.T) { assert.Equal(t, tc.want, duration(tc.d)) })
	}
}

func TestEnabled(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "out")
	require.NoError(t, err)
	defer f.Close()
	t.Setenv("TERM", "xterm")
	assert.False(t, Enabled(f, false), "a file is not a terminal")
	assert.False(t, Enabled(nil, false))

	// The master side of a pseudo-terminal is a terminal.
	tty, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer tty.Close()
	assert.True(t, Enabled(tty, false))
	assert.False(t, Enabled(tty, true), "--json")
	t.Setenv("TERM", "dumb")
	assert.False(t, Enabled(tty, false), "TERM=dumb")
}
