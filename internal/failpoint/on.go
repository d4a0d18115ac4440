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
// every tool).
func Hit(name, tool string) {
	if lookup(name, tool) != "kill" {
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
