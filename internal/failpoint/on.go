//go:build airlocktest

package failpoint

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Enabled reports whether this build has failpoints.
const Enabled = true

// armed maps NAME or NAME:TOOL to its action ("kill" or "error"); after
// maps a kill point armed as NAME@N to the hit that kills (the Nth).
var armed, after = parse(os.Getenv(EnvVar))

var (
	mu   sync.Mutex
	hits = map[string]int{}
)

func parse(s string) (map[string]string, map[string]int) {
	m, n := map[string]string{}, map[string]int{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		action := "kill"
		if name, ok := strings.CutSuffix(f, "=error"); ok {
			f, action = name, "error"
		} else if name, d, ok := strings.Cut(f, "=pause-each:"); ok {
			if _, err := time.ParseDuration(d); err == nil {
				f, action = name, "pause-each:"+d
			}
		} else if name, d, ok := strings.Cut(f, "=pause:"); ok {
			if _, err := time.ParseDuration(d); err == nil {
				f, action = name, "pause:"+d
			}
		}
		if name, count, ok := strings.Cut(f, "@"); ok {
			if c, err := strconv.Atoi(count); err == nil && c > 0 {
				f, n[name] = name, c
			}
		}
		m[f] = action
	}
	return m, n
}

func lookup(name, tool string) string {
	if a, ok := armed[name+":"+tool]; ok {
		return a
	}
	return armed[name]
}

// Hit kills the process with SIGKILL if name is armed (for tool, or for
// every tool), or, armed as NAME=pause:DURATION, stops the calling
// goroutine there for that long, once (NAME=pause-each:DURATION: at
// every hit), so that a test can break something
// (a NATS node) at that point.
func Hit(name, tool string) {
	action := lookup(name, tool)
	if d, ok := strings.CutPrefix(action, "pause-each:"); ok {
		dur, _ := time.ParseDuration(d)
		fmt.Fprintf(os.Stderr, "failpoint %s (%s): pause %s\n", name, tool, dur)
		time.Sleep(dur)
		return
	}
	if d, ok := strings.CutPrefix(action, "pause:"); ok {
		mu.Lock()
		hits[name+"=pause"]++
		first := hits[name+"=pause"] == 1
		mu.Unlock()
		if first {
			dur, _ := time.ParseDuration(d)
			fmt.Fprintf(os.Stderr, "failpoint %s (%s): pause %s\n", name, tool, dur)
			time.Sleep(dur)
		}
		return
	}
	if action != "kill" {
		return
	}
	if n, ok := after[name]; ok {
		mu.Lock()
		hits[name]++
		h := hits[name]
		mu.Unlock()
		if h < n {
			return
		}
	}
	fmt.Fprintf(os.Stderr, "failpoint %s (%s): SIGKILL\n", name, tool)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}

// ErrInjected is the error an armed error point returns.
var ErrInjected = errors.New("failpoint: injected error")

// Err returns ErrInjected if name is armed with =error.
func Err(name, tool string) error {
	if lookup(name, tool) == "error" {
		return fmt.Errorf("%s (%s): %w", name, tool, ErrInjected)
	}
	return nil
}
