//go:build airlocktest

package failpoint

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
)

// Enabled reports whether this build has failpoints.
const Enabled = true

// armed maps NAME or NAME:TOOL to its action ("kill" or "error").
var armed = parse(os.Getenv(EnvVar))

func parse(s string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		action := "kill"
		if name, ok := strings.CutSuffix(f, "=error"); ok {
			f, action = name, "error"
		}
		m[f] = action
	}
	return m
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
