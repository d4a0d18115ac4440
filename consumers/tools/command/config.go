package command

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/events"
)

// Defaults and hard limits.
const (
	// DefaultTimeout is a call's timeout when its args name none.
	DefaultTimeout = 30 * time.Second
	// DefaultMaxTimeout bounds the timeout_ms a call may ask for.
	DefaultMaxTimeout = 10 * time.Minute
	// DefaultMaxOutput is how much of each of stdout and stderr is kept.
	DefaultMaxOutput = 1 << 20
	// MaxArgv bounds the number of argv entries.
	MaxArgv = 1024
	// MaxArgvBytes bounds the total bytes of the argv entries.
	MaxArgvBytes = 256 << 10
	// DrainGrace is how long the output pipes may stay open after the
	// process group was killed (held by a process that left the group)
	// before they are closed regardless.
	DrainGrace = 2 * time.Second
)

// Config configures an Exec. Validate fills the defaults; New calls it.
type Config struct {
	// Root returns the workspace root the policy configures for ws, or ""
	// when it has none. A call of a workspace with a root runs there; a
	// root that does not exist fails the call with NO_WORKSPACE_ROOT. A
	// call of a workspace without one runs in a fresh temporary directory
	// removed afterwards. Nil means no workspace has a root. It must be
	// safe for concurrent use.
	Root func(ws string) string
	// LedgerDir holds the durable per-attempt records recovery reads
	// (a journal of segment files, internal/ledger). Required; created
	// (0700) if missing. It must be on a file system where fsync is
	// durable, and private to Airlock.
	LedgerDir string
	// LedgerNoSync writes the ledger without fsync (ledger.Ledger.NoSync):
	// its records survive a crash of the process, not of the machine.
	// Right beside an embedded server that fsyncs on an interval, which
	// loses the op's events to a power loss too.
	LedgerNoSync bool
	// EnvAllow names the variables of Airlock's own environment the child
	// gets; it gets nothing else. Default ["PATH"]. An empty, non-nil
	// slice gives the child an empty environment.
	EnvAllow []string
	// DefaultTimeout is a call's timeout when its args give no
	// timeout_ms; default 30s.
	DefaultTimeout time.Duration
	// MaxTimeout bounds timeout_ms; default 10m. A larger timeout_ms is
	// INVALID_ARGS.
	MaxTimeout time.Duration
	// MaxOutput is how many bytes of each of stdout and stderr are kept;
	// the rest is read and discarded. Default 1 MiB.
	MaxOutput int
	// MaxResult bounds the encoded result, so that it can always be
	// stored: when the kept output would make it larger, stdout and stderr
	// are cut further (and marked truncated). Default and upper bound
	// events.MaxResultBytes.
	MaxResult int
	// Bubblewrap is the path of the bwrap binary. Empty (the default)
	// runs argv directly; set, every call runs inside bwrap (see
	// docs/exec.md for the exact arguments). It must exist when New runs.
	Bubblewrap string
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// EnsureDefaults fills in the defaults of what is unset.
func (c *Config) EnsureDefaults() {
	if c.EnvAllow == nil {
		c.EnvAllow = []string{"PATH"}
	}
	if c.DefaultTimeout == 0 {
		c.DefaultTimeout = DefaultTimeout
	}
	if c.MaxTimeout == 0 {
		c.MaxTimeout = DefaultMaxTimeout
	}
	if c.MaxOutput == 0 {
		c.MaxOutput = DefaultMaxOutput
	}
	if c.MaxResult == 0 {
		c.MaxResult = events.MaxResultBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks the config, as EnsureDefaults left it; it changes
// nothing.
func (c *Config) Validate() error {
	if c.LedgerDir == "" {
		return errors.New("command: LedgerDir is required")
	}
	for _, name := range c.EnvAllow {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			return fmt.Errorf("command: EnvAllow entry %q is not a variable name", name)
		}
	}
	if c.DefaultTimeout < time.Millisecond || c.MaxTimeout < time.Millisecond {
		return fmt.Errorf("command: timeouts must be at least 1ms (DefaultTimeout %s, MaxTimeout %s)", c.DefaultTimeout, c.MaxTimeout)
	}
	if c.DefaultTimeout > c.MaxTimeout {
		return fmt.Errorf("command: DefaultTimeout %s above MaxTimeout %s", c.DefaultTimeout, c.MaxTimeout)
	}
	if c.MaxOutput < 0 {
		return fmt.Errorf("command: MaxOutput %d is negative", c.MaxOutput)
	}
	if c.MaxResult < 1024 || c.MaxResult > events.MaxResultBytes {
		return fmt.Errorf("command: MaxResult %d outside [1024, %d]", c.MaxResult, events.MaxResultBytes)
	}
	if c.Bubblewrap != "" {
		if !filepath.IsAbs(c.Bubblewrap) {
			return fmt.Errorf("command: Bubblewrap %q is not an absolute path", c.Bubblewrap)
		}
		fi, err := os.Stat(c.Bubblewrap)
		if err != nil {
			return fmt.Errorf("command: Bubblewrap: %w", err)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("command: Bubblewrap %s is not an executable file", c.Bubblewrap)
		}
	}
	return nil
}
