package command

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/failpoint"
	"github.com/airlock-dev/airlock/internal/ledger"
)

// Exec is the "exec" tool: it runs an argv as a child process of Airlock,
// records each attempt in a durable ledger and recovers a lost attempt
// from it, never spawning a started attempt again. It is safe for
// concurrent use.
type Exec struct {
	cfg    Config
	ledger ledger.Ledger
	log    *slog.Logger
}

// New returns an Exec; it validates cfg and creates LedgerDir.
func New(cfg Config) (*Exec, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.LedgerDir, 0o700); err != nil {
		return nil, fmt.Errorf("command: ledger: %w", err)
	}
	return &Exec{cfg: cfg, ledger: ledger.Ledger{Dir: cfg.LedgerDir, Name: "exec", NoSync: cfg.LedgerNoSync}, log: cfg.Logger}, nil
}

// Tool is "exec".
func (*Exec) Tool() string { return "exec" }

// Class is exec.
func (*Exec) Class() events.Class { return events.ClassExec }

// Execute runs the call's argv and returns its Result as JSON. Refusals
// come before anything is written or spawned: INVALID_ARGS (see
// ParseArgs), PRIVILEGE_ESCALATION (see CheckEscalation),
// NO_WORKSPACE_ROOT, and EXECUTOR_FAILED for a program that is not found
// or cannot be started. A process that ran and exited non-zero, was
// killed by a signal or timed out is a completed call: its Result says so.
// When ctx ends the process group is killed, the result recorded in the
// ledger, and ctx's error returned.
func (e *Exec) Execute(ctx context.Context, c executor.Call) (json.RawMessage, error) {
	a, err := ParseArgs(c.Args, e.cfg.MaxTimeout)
	if err != nil {
		return nil, err
	}
	if err := CheckEscalation(a.Argv); err != nil {
		return nil, err
	}
	dir, cleanup, err := e.workdir(c.Workspace)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	sp, err := e.command(a.Argv, dir)
	if err != nil {
		return nil, events.Errorf(events.CodeExecutorFailed, "exec: %s; nothing ran", startError(err))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	log := e.log.With("op", c.OpID, "ws", c.Workspace, "attempt", c.Attempt)

	record, rec, err := e.begin(c.OpID, c.Attempt, a.Argv, time.Now())
	if errors.Is(err, ledger.ErrStarted) {
		return nil, events.Errorf(events.CodeAmbiguous, "exec attempt %s was started before; it is never run again", c.Attempt)
	}
	if err != nil {
		return nil, events.Errorf(events.CodeExecutorFailed, "exec: %v; nothing ran", err)
	}
	o, err := sp.run(ctx, a.Timeout(e.cfg.DefaultTimeout), func(pid int) {
		rec.PID = pid
		if err := e.spawned(record, rec); err != nil {
			log.Warn("exec: recording the pid", "err", err)
		}
	})
	if err != nil {
		if aerr := record.Abandon(); aerr != nil {
			// Left in place, the record makes a recovery say ambiguous
			// for a call that never ran: wrong, but never a second run.
			log.Error("exec: removing the record of an attempt that never started", "err", aerr)
		}
		return nil, events.Errorf(events.CodeExecutorFailed, "exec: start: %s; nothing ran", startError(err))
	}
	if o.stray {
		log.Warn("exec: processes outside the process group held the output open; stopped reading")
	}
	if o.waitErr != nil {
		log.Error("exec: reaping the process", "err", o.waitErr)
	}
	r := sp.result(o)
	body, err := r.encode(e.cfg.MaxResult)
	if err != nil {
		return nil, events.Errorf(events.CodeAmbiguous, "exec attempt %s ran, its result cannot be encoded: %v", c.Attempt, err)
	}
	if err := e.ledger.Finish(c.OpID, c.Attempt, body); err != nil {
		// The result still goes to the runner, which stores it. Only a
		// crash before that leaves the op ambiguous, as it would be
		// without the ledger.
		log.Error("exec: recording the result in the ledger", "err", err)
	}
	failpoint.Hit(failpoint.AfterEffect, e.Tool())
	log.Debug("exec ran", "exit_code", r.ExitCode, "signal", r.Signal, "timed_out", r.TimedOut, "duration_ms", r.DurationMS)
	if o.cancelled {
		return nil, fmt.Errorf("exec: process group killed: %w", ctx.Err())
	}
	return body, nil
}

// workdir returns the directory a call of ws runs in and a function that
// cleans up after it: the workspace root, or a fresh temporary directory.
func (e *Exec) workdir(ws string) (string, func(), error) {
	root := e.root(ws)
	if root == "" {
		tmp, err := os.MkdirTemp("", "airlock-exec-*")
		if err != nil {
			return "", nil, events.Errorf(events.CodeExecutorFailed, "exec: temporary directory: %v; nothing ran", err)
		}
		return tmp, func() {
			if err := os.RemoveAll(tmp); err != nil {
				e.log.Warn("exec: removing the temporary directory", "err", err)
			}
		}, nil
	}
	abs, err := filepath.Abs(root)
	if err == nil {
		var fi os.FileInfo
		if fi, err = os.Stat(abs); err == nil && !fi.IsDir() {
			err = errors.New("not a directory")
		}
	}
	if err != nil {
		return "", nil, events.Errorf(events.CodeNoWorkspaceRoot, "exec: workspace %q root %s: %v", ws, root, err)
	}
	return abs, func() {}, nil
}

func (e *Exec) root(ws string) string {
	if e.cfg.Root == nil {
		return ""
	}
	return e.cfg.Root(ws)
}

var (
	_ executor.Executor = (*Exec)(nil)
	_ executor.Operands = (*Exec)(nil)
)

var _ executor.Keeper = (*Exec)(nil)
